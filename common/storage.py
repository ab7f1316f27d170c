"""Storage: where a path lives (the one scheme rule) and how a file is put there (the one
atomic write). Every writer of the project (`dataset_format`, `pipelines`, `train`, through
them `tools`) puts its files in place through this module.

The scheme rule: a path is a URL when it starts with a scheme and `://` (`gs://bucket/x`,
`s3://...`, an fsspec chain such as `simplecache::gs://...`); anything else is a local path,
whatever it holds further on (`out/a://b`, `C:\\data`, `C://data`: a one-letter scheme is a
drive). `file://` URLs are local. A remote URL goes through Beam's FileSystems when Beam has the
scheme built in (so a Dataflow worker needs nothing extra), else through fsspec.

The atomic write: a file is written under a temporary name in its own folder,
`<name>.tmp-<12 hex digits>` (`tmp_name`), synced where the caller needs it to survive a
crash, then renamed over its final name (`replace`), so a reader sees the old file or the new
one, never half of one; a write that fails removes its temporary. A run killed mid-write leaves
the temporary: the ownership rule (`common.output_dir`) counts it as its final name
(`base_name`), so it never makes a run's own folder look foreign. On a remote folder the file
is built locally, uploaded under its temporary name and renamed by the filesystem (`OutputDir`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable
from typing import BinaryIO

# the schemes Beam's FileSystems serve without fsspec
BEAM_SCHEMES = ("gs://", "s3://", "hdfs://", "azfs://")
LOCAL, BEAM, FSSPEC = "local", "beam", "fsspec"
_FILE = "file://"
# a scheme of two or more letters (one letter is a Windows drive), after any fsspec chain
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*::)*[A-Za-z][A-Za-z0-9+.\-]+://")
# `tmp_name`'s suffix; a shorter one is a process id (a file rewritten by one process at a time)
_TMP_SUFFIX = re.compile(r"\.tmp-[0-9a-f]{1,12}$")


# -- the scheme rule ------------------------------------------------------------------------
def is_url(path: str) -> bool:
    """Whether `path` is a URL (`file://` ones included), not a plain local path."""
    return bool(_URL.match(path))


def is_remote(path: str) -> bool:
    """Whether `path` is a URL of a remote store (not a local path, not `file://`)."""
    return is_url(path) and not path.startswith(_FILE)


def local_path(path: str) -> str | None:
    """The local file name of `path` (`file://` removed), None for a remote one."""
    if path.startswith(_FILE):
        return path[len(_FILE) :]
    return None if is_url(path) else path


def backend(path: str) -> str:
    """Which filesystem serves `path`: LOCAL, BEAM (Beam's own schemes) or FSSPEC."""
    if not is_remote(path):
        return LOCAL
    return BEAM if path.startswith(BEAM_SCHEMES) else FSSPEC


def parent_and_name(path: str) -> tuple[str, str]:
    """(the folder holding `path`, its name): an absolute folder for a local path, the URL up
    to its last '/' for a URL (`OutputDir(folder)` writes `name` there)."""
    if is_url(path):
        folder, _, name = path.rstrip("/").rpartition("/")
        return folder, name
    return os.path.split(os.path.abspath(path))


def normalize(url: str) -> str:
    """An absolute local path, or the URL without a trailing slash."""
    local = local_path(url)
    return os.path.abspath(local) if local is not None else url.rstrip("/")


# -- temporary names ------------------------------------------------------------------------
def tmp_name(name: str) -> str:
    """A temporary name for `name` (a file name or path), which the ownership rule counts as
    `name` (see `base_name`); unique, so two writers of one name never share it."""
    return f"{name}.tmp-{uuid.uuid4().hex[:12]}"


def base_name(name: str) -> str:
    """The final name of a file written under a temporary name (`tmp_name`)."""
    return _TMP_SUFFIX.sub("", name)


# -- the atomic write (local) ---------------------------------------------------------------
def replace(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Put `tmp` (a complete file or folder) in place as `final` in one rename; the one place
    the project renames what it wrote. A folder replaces only a missing or empty one (else
    OSError, as rename(2))."""
    os.replace(tmp, final)


def sync_folder(path: str) -> None:
    """Make the renames in folder `path` durable (a crash after this keeps them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(path: str) -> None:
    """Remove a temporary file if it is there (a failed write's leftover)."""
    if os.path.lexists(path):
        os.remove(path)


def write_atomic_to(path: str, write: Callable[[str], object]) -> None:
    """`path` written by `write(temporary_path)` (for a writer that takes a file name:
    `torch.save` names its archive after the file) under a temporary name in its folder, then
    renamed into place. On any failure the temporary is removed and an earlier `path` stays as
    it was."""
    tmp = tmp_name(path)
    try:
        write(tmp)
        replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def write_atomic_with(path: str, write: Callable[[BinaryIO], object], *, sync: bool = True) -> None:
    """`write_atomic_to` for a writer that streams into a binary file (`np.save`):
    `write(file)`; the file is synced to disk before the rename unless `sync` is False."""

    def write_file(tmp: str) -> None:
        with open(tmp, "wb") as f:
            write(f)
            if sync:
                f.flush()
                os.fsync(f.fileno())

    write_atomic_to(path, write_file)


def write_atomic(path: str, data: bytes, *, sync: bool = True) -> None:
    """`write_atomic_with` for bytes already in memory."""
    write_atomic_with(path, lambda f: f.write(data), sync=sync)


def write_text_atomic(path: str, text: str, *, sync: bool = True) -> None:
    """`write_atomic` for text (UTF-8)."""
    write_atomic(path, text.encode("utf-8"), sync=sync)


def write_lines_atomic(path: str, lines: Iterable[str], *, sync: bool = True) -> None:
    """`write_atomic_with` for text lines (UTF-8), streamed."""
    write_atomic_with(path, lambda f: f.writelines(s.encode("utf-8") for s in lines), sync=sync)


# -- one folder on any storage ------------------------------------------------------------
class OutputDir:
    """One folder on a local disk, a Beam filesystem (gs://, s3://...) or fsspec.

    Every write is atomic: to a temporary name first, then renamed, so a reader (or a retried
    attempt) never sees half a file under a final name. Every write of a pipeline run goes
    through this class, which makes it the seam where tests inject storage faults (a full disk
    at a named file: tests/unit/pipelines/write/test_pipeline_output.py), as `train.loop.TrainHooks` is the trainer's.
    """

    def __init__(self, url: str, backend_name: str | None = None):
        self.url = normalize(url)
        self.backend = backend_name or backend(self.url)
        self._fs = None

    def __getstate__(self):
        return {"url": self.url, "backend": self.backend}

    def __setstate__(self, state):
        self.__init__(state["url"], state["backend"])

    @property
    def is_local(self) -> bool:
        return self.backend == LOCAL

    def child(self, name: str) -> OutputDir:
        return OutputDir(self.path(name), self.backend)

    def path(self, name: str) -> str:
        return os.path.join(self.url, name) if self.is_local else f"{self.url}/{name}"

    @property
    def fs(self):
        if self._fs is None:
            import fsspec

            self._fs, _ = fsspec.core.url_to_fs(self.url)
        return self._fs

    def makedirs(self) -> None:
        if self.is_local:
            os.makedirs(self.url, exist_ok=True)
        elif self.backend == FSSPEC:
            self.fs.makedirs(self.url, exist_ok=True)
        # Object stores (the Beam backend) have no directories to make.

    def put_file(self, local_file: str, name: str, *, atomic: bool = True) -> None:
        """Copy a local file in as `name`, atomically (through a temporary name) unless the
        caller's protocol already keeps readers off a half-written file."""
        final = self.path(name)
        tmp = self.path(tmp_name(name)) if atomic else final
        if self.is_local:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            shutil.copyfile(local_file, tmp)
            if atomic:
                replace(tmp, final)
        elif self.backend == BEAM:
            from apache_beam.io.filesystem import CompressionTypes
            from apache_beam.io.filesystems import FileSystems

            with (
                open(local_file, "rb") as src,
                FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as dst,
            ):
                shutil.copyfileobj(src, dst, 16 << 20)
            if atomic:
                FileSystems.rename([tmp], [final])
        else:
            self.fs.put_file(local_file, tmp)
            if atomic:
                self.fs.mv(tmp, final)

    def staging(self, prefix: str) -> str:
        """A local folder to build this folder's files in, under their final names: the folder
        itself when it is local, else a new temporary one (`unstage` removes it). For files
        whose name is handed on only once they are complete (spills, stash, band files), so
        none needs a temporary name."""
        if self.is_local:
            os.makedirs(self.url, exist_ok=True)
            return self.url
        return tempfile.mkdtemp(prefix=prefix)

    def publish(self, local_file: str) -> str:
        """A complete file built in `staging()` put in place under its name, which it returns:
        uploaded (and the local copy removed) on a remote folder, there already on a local one."""
        name = os.path.basename(local_file)
        if not self.is_local:
            self.put_file(local_file, name, atomic=False)
            os.remove(local_file)
        return name

    def unstage(self, staging: str) -> None:
        if not self.is_local:
            shutil.rmtree(staging, ignore_errors=True)

    def get_file(self, name: str, local_file: str) -> None:
        if self.is_local:
            shutil.copyfile(self.path(name), local_file)
        elif self.backend == BEAM:
            with self._beam_open(name) as src, open(local_file, "wb") as dst:
                shutil.copyfileobj(src, dst, 16 << 20)
        else:
            self.fs.get_file(self.path(name), local_file)

    def write_bytes(self, name: str, data: bytes) -> None:
        self.write_with(name, lambda f: f.write(data))

    def write_with(self, name: str, write: Callable[[BinaryIO], object]) -> None:
        """`name` written atomically by `write(file)`, which streams into it (on a remote
        folder, into a local temporary file that is then put in place)."""
        if self.is_local:
            os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
            write_atomic_with(self.path(name), write)
            return
        with tempfile.NamedTemporaryFile(delete=False) as f:
            write(f)
        try:
            self.put_file(f.name, name)
        finally:
            os.remove(f.name)

    def read_bytes(self, name: str, limit: int | None = None) -> bytes:
        """`name`'s bytes; with `limit`, at most limit + 1 of them (more than `limit` back
        means the file is larger: the caller says so, without having read it whole)."""
        size = -1 if limit is None else limit + 1
        if self.is_local:
            with open(self.path(name), "rb") as f:
                return f.read(size)
        if self.backend == BEAM:
            with self._beam_open(name) as f:
                return f.read(size)
        if limit is None:
            return self.fs.cat_file(self.path(name))
        return self.fs.cat_file(self.path(name), start=0, end=size)

    def _beam_open(self, name: str):
        """`name` opened for reading through Beam's filesystems, as stored (a .gz stays gzip)."""
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.open(self.path(name), compression_type=CompressionTypes.UNCOMPRESSED)

    def size(self, name: str) -> int | None:
        """Bytes in `name`, or None when it does not exist."""
        path = self.path(name)
        if self.is_local:
            return os.path.getsize(path) if os.path.isfile(path) else None
        if self.backend == BEAM:
            from apache_beam.io.filesystems import FileSystems

            if not FileSystems.exists(path):
                return None
            return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
        return int(self.fs.size(path)) if self.fs.isfile(path) else None

    def list_files(self) -> list[str]:
        """Names of the files directly in this directory (sorted)."""
        if self.is_local:
            return self._local_names(os.path.isfile)
        if self.backend == BEAM:
            from apache_beam.io.filesystems import FileSystems

            found = FileSystems.match([self.path("*")])[0].metadata_list
            return sorted(m.path.rsplit("/", 1)[-1] for m in found if not m.path.endswith("/"))
        return self._fsspec_names("file")

    def list_links(self) -> list[str]:
        """Names of the symbolic links directly in this directory (object stores have none)."""
        if not self.is_local or not os.path.isdir(self.url):
            return []
        return sorted(e.name for e in os.scandir(self.url) if e.is_symlink())

    def list_dirs(self) -> list[str]:
        """Names of the subdirectories (on an object store: of the prefixes below this one)."""
        if self.is_local:
            return self._local_names(os.path.isdir)
        if self.backend == BEAM:
            from apache_beam.io.filesystems import FileSystems

            found = FileSystems.match([self.path("**")])[0].metadata_list
            prefix = self.url + "/"
            return sorted(
                {m.path[len(prefix) :].split("/")[0] for m in found if "/" in m.path[len(prefix) :]}
            )
        return self._fsspec_names("directory")

    def _local_names(self, is_kind) -> list[str]:
        """Names of the entries directly in this local directory whose path passes `is_kind`."""
        if not os.path.isdir(self.url):
            return []
        return sorted(n for n in os.listdir(self.url) if is_kind(self.path(n)))

    def _fsspec_names(self, kind: str) -> list[str]:
        """Names of the entries of fsspec type `kind` ("file", "directory") directly in here."""
        if not self.fs.exists(self.url):
            return []
        entries = self.fs.ls(self.url, detail=True)
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == kind
        )

    def delete(self, names: Iterable[str]) -> None:
        paths = [self.path(n) for n in names]
        if not paths:
            return
        if self.is_local:
            for path in paths:
                if os.path.exists(path):
                    os.remove(path)
        elif self.backend == BEAM:
            from apache_beam.io.filesystems import FileSystems

            # One batched call: GCS and S3 delete up to 100-1000 objects per request.
            FileSystems.delete([p for p in paths if FileSystems.exists(p)])
        else:
            found = [p for p in paths if self.fs.exists(p)]
            if found:
                self.fs.rm(found)  # one call: fsspec stores batch or parallelise it

    def delete_tree(self) -> None:
        """Remove this directory and everything in it (nothing to do if it is not there)."""
        if self.is_local:
            shutil.rmtree(self.url, ignore_errors=True)
        elif self.backend == BEAM:
            from apache_beam.io.filesystems import FileSystems

            found = FileSystems.match([self.path("**")])[0].metadata_list
            if found:
                FileSystems.delete([m.path for m in found])
        elif self.fs.exists(self.url):
            self.fs.rm(self.url, recursive=True)
