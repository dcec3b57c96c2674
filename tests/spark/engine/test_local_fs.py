"""The project's local file system (jvm/localfs, decision 0020) in the suite's own session:
Hadoop's answers, without a forked ``chmod`` or ``readlink``.

Hadoop's own ``LocalFileSystem``, made beside it in the same JVM, is the oracle: the same
permissions on what each creates or changes, the same link status, and the ``FileContext``
rename over an existing file that Spark's checkpoint does at every batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.spark.engine import localfs

MODES = (0o600, 0o640, 0o644, 0o700, 0o755, 0o444, 0o000)


@pytest.fixture(scope="module")
def hadoop(spark) -> dict[str, Any]:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    uri = jvm.java.net.URI("file:///")
    theirs = jvm.org.apache.hadoop.fs.LocalFileSystem()
    theirs.initialize(uri, conf)
    return {"jvm": jvm, "gateway": spark.sparkContext._gateway,
            "ours": jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf),
            "theirs": theirs, "fc": jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)}


def _path(h: dict[str, Any], path: Path) -> Any:
    return h["jvm"].org.apache.hadoop.fs.Path(f"file://{path}")


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def test_the_session_s_file_system_and_file_context_are_the_project_s(hadoop) -> None:
    assert hadoop["ours"].getClass().getName() == localfs.FILE_SYSTEM
    assert hadoop["ours"].getRawFileSystem().getClass().getName() == \
        "urbpipe.hadoop.NioRawLocalFileSystem"
    assert hadoop["fc"].getDefaultFileSystem().getClass().getName() == localfs.FILE_CONTEXT


def test_created_files_and_changed_permissions_match_hadoop_s(hadoop, tmp_path: Path) -> None:
    perm = hadoop["jvm"].org.apache.hadoop.fs.permission.FsPermission
    for mode in MODES:
        for who in ("ours", "theirs"):
            target = tmp_path / f"{who}-{mode:o}"
            out = hadoop[who].create(_path(hadoop, target), perm(mode), True, 4096, 1,
                                     1 << 20, None)
            out.write(b"x")
            out.close()
            (tmp_path / f"{who}-changed-{mode:o}").write_bytes(b"y")
            hadoop[who].setPermission(_path(hadoop, tmp_path / f"{who}-changed-{mode:o}"),
                                      perm(mode))
        assert _mode(tmp_path / f"ours-{mode:o}") == _mode(tmp_path / f"theirs-{mode:o}")
        assert _mode(tmp_path / f"ours-changed-{mode:o}") == mode
        assert _mode(tmp_path / f"theirs-changed-{mode:o}") == mode


def test_link_status_matches_hadoop_s_for_files_links_and_missing_paths(hadoop,
                                                                       tmp_path: Path) -> None:
    jvm = hadoop["jvm"]
    (tmp_path / "file").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("file", "link", "dangling", "none"):
        for path in (_path(hadoop, tmp_path / name),
                     jvm.org.apache.hadoop.fs.Path(str(tmp_path / name))):
            ours, theirs = (_link_status(hadoop[w].getRawFileSystem(), path)
                            for w in ("ours", "theirs"))
            assert ours == theirs, (name, path)
    assert _link_status(hadoop["ours"].getRawFileSystem(), jvm.org.apache.hadoop.fs.Path(
        str(tmp_path / "link")))[0] is True  # a link is seen as one


def _link_status(fs: Any, path: Any) -> tuple[Any, ...]:
    """What a file system answers of ``path``'s link status, or the exception it raises."""
    try:
        status = fs.getFileLinkStatus(path)
    except Exception as exc:
        return ("raised", type(exc).__name__, "FileNotFoundException" in str(exc))
    return (status.isSymlink(), status.getLen(), status.isDirectory(),
            str(status.getPath()))


def test_file_context_renames_over_an_existing_file(hadoop, tmp_path: Path) -> None:
    """What Spark's offset and commit logs do at every batch: write a temporary file, then
    rename it over the target with OVERWRITE."""
    jvm, fc, gateway = hadoop["jvm"], hadoop["fc"], hadoop["gateway"]
    fs = jvm.org.apache.hadoop.fs
    (tmp_path / "target").write_bytes(b"old")
    out = fc.create(_path(hadoop, tmp_path / ".tmp"), jvm.java.util.EnumSet.of(
        fs.CreateFlag.CREATE), gateway.new_array(fs.Options.CreateOpts, 0))
    out.write(b"new")
    out.close()
    overwrite = gateway.new_array(fs.Options.Rename, 1)
    overwrite[0] = fs.Options.Rename.OVERWRITE
    fc.rename(_path(hadoop, tmp_path / ".tmp"), _path(hadoop, tmp_path / "target"), overwrite)
    assert (tmp_path / "target").read_bytes() == b"new"
    assert not (tmp_path / ".tmp").exists()
