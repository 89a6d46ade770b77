"""Two builds on one machine compile each unit at the same fixed path (named by its variants, not by its source):
the copy and the compile hold the directory's lock, in the Python path (build_tools nvcc, the Ascend compile) and
in the ninja rule (flock(1) on the same file), so one build never compiles the other's source."""
import fcntl
import multiprocessing
import shutil
import subprocess

import pytest

from build_tools import toolchain


def _try_lock(path, queue):
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            queue.put("blocked")
        else:
            queue.put("acquired")


def _other_process_gets(path):
    queue = multiprocessing.get_context("spawn").Queue()
    p = multiprocessing.get_context("spawn").Process(target=_try_lock, args=(str(path), queue))
    p.start()
    p.join(60)
    return queue.get(timeout=5)


def test_the_lock_excludes_another_process_until_released(tmp_path):
    d = tmp_path / "unit"
    with toolchain.canonical_lock(d) as held:
        assert held == d
        assert _other_process_gets(d / toolchain.LOCK_NAME) == "blocked"
    assert _other_process_gets(d / toolchain.LOCK_NAME) == "acquired"


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock(1) (util-linux) is not installed")
def test_the_ninja_rule_copies_and_compiles_under_the_same_lock(tmp_path):
    cmd = toolchain.ninja_nvcc_command(["-I/include"])
    d = f"{toolchain.CANONICAL_SOURCE_ROOT}/$stem"
    assert f"flock {d}/{toolchain.LOCK_NAME} sh -c '" in cmd
    locked = cmd.split(" sh -c ", 1)[1]
    assert "cp $in" in locked and "nvcc" in locked and locked.endswith("'")
    # the rule runs in a shell: ninja's variables filled in, nvcc replaced by a stand-in that copies its source
    fake = tmp_path / "fake-nvcc"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done\ncp "$3" "$2"\n')
    fake.chmod(0o755)
    src, out, root = tmp_path / "unit.cu", tmp_path / "unit.cubin", tmp_path / "root"
    src.write_text("// unit\n")
    shell = (cmd.replace(str(toolchain.CANONICAL_SOURCE_ROOT), str(root)).replace(toolchain.find_nvcc(), str(fake))
             .replace("$stem", "unit").replace("$name", "unit.cu").replace("$in", str(src)).replace("$out", str(out))
             .replace("$arch", "sm_90a").replace("$$", "$"))
    with toolchain.canonical_lock(root / "unit"):
        p = subprocess.Popen(["sh", "-c", shell])
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(1.0)  # it waits for the lock held here
        assert not out.exists()
    assert p.wait(60) == 0
    assert out.read_text() == "// unit\n" and (root / "unit" / "unit.cu").read_text() == "// unit\n"
