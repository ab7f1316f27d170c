# Forward to the native C++ rules (Bazel 4), so @bazel_tools loads without a download.
cc_library = native.cc_library
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
cc_binary = native.cc_binary
cc_test = native.cc_test
