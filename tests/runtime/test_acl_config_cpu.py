"""kernelkiln.config on an Ascend machine, answered through the CANN runtime: the machine is stood in (is_ascend
forced true), libascendcl.so is the recording stand-in of tests/acl_standin.py (32 cube cores, 64 vector cores on
npu:0, one more cube core per device index), torch_npu is absent. On CUDA machines config is unchanged
(tests/runtime/test_cpu_only_errors.py)."""
import ctypes

import acl_standin
import pytest

from kernelkiln import config
from kernelkiln._runtime import acl
from kernelkiln._runtime.artifacts import UnsupportedDeviceError


@pytest.fixture(scope="module")
def standin_path(tmp_path_factory):
    so = acl_standin.build(tmp_path_factory.mktemp("acl"))
    if so is None:
        pytest.skip("no C compiler (cc or gcc) on this machine to build the libascendcl.so stand-in")
    return so


@pytest.fixture
def ascend_machine(standin_path, monkeypatch):
    monkeypatch.setenv("KERNELKILN_ASCENDCL", str(standin_path))
    monkeypatch.setattr(config, "is_ascend", lambda: True)
    acl.reset()
    config.get_device_num_sms.cache_clear()
    config.reset_runtime_config()
    rec = acl_standin.Recorder(ctypes.CDLL(str(standin_path)))
    rec.reset()
    yield rec
    acl.reset()
    config.get_device_num_sms.cache_clear()
    config.reset_runtime_config()


def test_core_counts_come_from_the_device(ascend_machine):
    assert config.get_device_num_sms() == 32  # no device set on the thread: npu:0
    assert config.get_num_sms() == config.get_num_ai_cores() == config.get_num_cube_cores() == 32
    assert config.get_num_vec_cores() == 64
    assert config.get_device_num_sms(1) == 33  # asked for another device, answered for it


def test_the_current_device_is_the_one_asked(ascend_machine):
    ascend_machine.set("device_set", 1)
    ascend_machine.set("current_device", 2)
    assert config.get_num_cube_cores() == 34 and config.get_num_vec_cores() == 68


def test_set_num_sms_limits_every_core_query_as_the_peer_s_do(ascend_machine):
    config.set_num_sms(8)
    assert (config.get_num_ai_cores(), config.get_num_cube_cores(), config.get_num_vec_cores()) == (8, 8, 16)
    assert config.ascend_cores("vector", 0) == 16 and config.ascend_cores("cube", 0) == 8
    with pytest.raises(ValueError, match=r"1\.\.32"):
        config.set_num_sms(33)


def test_counts_are_read_once_per_device(ascend_machine):
    assert config.get_num_cube_cores() == 32
    ctypes.c_int64.in_dll(ascend_machine.lib, "cube_cores").value = 7  # the device would now say 7
    assert config.get_num_cube_cores() == 32
    config.get_device_num_sms.cache_clear()
    assert config.get_num_cube_cores() == 7
    ctypes.c_int64.in_dll(ascend_machine.lib, "cube_cores").value = 32


def test_unified_buffer_budget(ascend_machine):
    assert config.get_max_ub_per_vector_core() == 216 * 1024
    assert config.get_max_ub_per_vector_core(use_simt=False) == 248 * 1024


def test_an_acl_failure_is_a_clear_error(ascend_machine):
    ascend_machine.set("fail_get_device_info", 207000)
    with pytest.raises(acl.AclError, match=r"aclrtGetDeviceInfo\(102\) failed: ACL_ERROR_RT_FEATURE_NOT_SUPPORT"):
        config.get_num_vec_cores()


def test_an_ascend_machine_without_cann_names_the_runtime(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELKILN_ASCENDCL", str(tmp_path / "libascendcl.so"))
    monkeypatch.setattr(config, "is_ascend", lambda: True)
    acl.reset()
    config.get_device_num_sms.cache_clear()
    try:
        with pytest.raises(acl.AclUnavailableError, match=r"libascendcl.so\) was not found.*CANN >= 9.2"):
            config.get_num_vec_cores()
    finally:
        acl.reset()


def test_without_torch_npu_the_error_names_it():
    import importlib.util

    import torch
    if getattr(torch, "npu", None) is not None or importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here")
    with pytest.raises(UnsupportedDeviceError, match=r"needs torch_npu .*CANN runtime"):
        config.require_npu("an Ascend kernel launch")
