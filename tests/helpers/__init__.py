"""What several test modules share: builders of real inputs, runs of the commands and checks.

A test module imports its shared helpers from here (or takes them as fixtures from
tests/conftest.py), never from another test module (tests/unit/test_tests_layout.py checks it).
"""
