"""A recording stand-in for the CANN runtime's libascendcl.so, compiled by the tests with the system C compiler.

It exports the ACL entry points the Ascend loader calls (kernelkiln._runtime.acl) with their documented C
signatures and records what it receives: every binary load (the bytes and their size), every function lookup (the
name), every launch (function, block dim, stream, the launch config's attributes and the packed host arguments),
the aclrtSetDevice calls. It executes nothing: a launch is only recorded. Knobs make a call fail with an ACL error
code, and a load sleeps a little so that concurrent first calls would overlap if the loader did not serialize them.
"""
import ctypes
import shutil
import subprocess

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <stddef.h>
#include <unistd.h>

#define MAX_BYTES 4096
#define MAX_NAMES 4096
#define MAX_ARGS 512

/* what was received */
int load_count;
size_t load_sizes[16];
unsigned char load_bytes[MAX_BYTES];   /* the first load's image (up to MAX_BYTES) */
int load_devices[16];
char lookups[MAX_NAMES];               /* function names looked up, each followed by '\n' */
int lookup_count;
int launch_count;
void *launch_function;
uint32_t launch_blocks;
void *launch_stream;
int launch_device;
size_t launch_args_size;
unsigned char launch_args[MAX_ARGS];
int launch_num_attrs;                  /* -1: no config passed */
int32_t launch_attr_id;
uint32_t launch_attr_value;
void *launch_placeholders;
size_t launch_num_placeholders;
int set_device_count;

/* knobs: a non-zero code makes that call fail with it */
int fail_load, fail_lookup, fail_launch, fail_get_device_info;
int load_sleep_us = 20000;
int device_set = 0;                    /* 0: no device set yet, aclrtGetDevice fails with CONTEXT_NULL */
int current_device;
int64_t ai_cores = 32, cube_cores = 32, vector_cores = 64;
static const char *last_error = 0;

static int fail(int code, const char *msg) { last_error = msg; return code; }

int aclrtBinaryLoadFromData(const void *data, size_t size, const void *options, void **handle) {
  if (fail_load) return fail(fail_load, "stand-in: binary rejected");
  usleep(load_sleep_us);
  int i = __sync_fetch_and_add(&load_count, 1);
  if (i < 16) { load_sizes[i] = size; load_devices[i] = device_set ? current_device : -1; }
  if (i == 0) memcpy(load_bytes, data, size < MAX_BYTES ? size : MAX_BYTES);
  *handle = (void *)(uintptr_t)(0xB000 + i);
  return 0;
}

int aclrtBinaryGetFunction(void *binary, const char *name, void **function) {
  if (fail_lookup) return fail(fail_lookup, "stand-in: no such kernel function");
  size_t used = strlen(lookups), n = strlen(name);
  if (used + n + 1 < MAX_NAMES) { memcpy(lookups + used, name, n); lookups[used + n] = '\n'; lookups[used + n + 1] = 0; }
  int i = __sync_fetch_and_add(&lookup_count, 1);
  *function = (void *)((uintptr_t)binary * 0x100 + 1 + i);
  return 0;
}

int aclrtBinaryUnLoad(void *binary) { return 0; }

int aclrtLaunchKernelWithHostArgs(void *function, uint32_t blocks, void *stream, void *cfg, void *args,
                                  size_t args_size, void *placeholders, size_t num_placeholders) {
  if (fail_launch) return fail(fail_launch, "stand-in: launch refused");
  launch_count++;
  launch_function = function;
  launch_blocks = blocks;
  launch_stream = stream;
  launch_device = device_set ? current_device : -1;
  launch_args_size = args_size;
  memcpy(launch_args, args, args_size < MAX_ARGS ? args_size : MAX_ARGS);
  launch_placeholders = placeholders;
  launch_num_placeholders = num_placeholders;
  launch_num_attrs = -1;
  if (cfg) {
    struct { int32_t id; uint32_t value[4]; } *attrs = *(void **)cfg;
    launch_num_attrs = (int)*(size_t *)((char *)cfg + sizeof(void *));
    if (launch_num_attrs > 0) { launch_attr_id = attrs[0].id; launch_attr_value = attrs[0].value[0]; }
  }
  return 0;
}

int aclrtGetDevice(int32_t *device) {
  if (!device_set) return fail(107002, "stand-in: no device set on this thread");
  *device = current_device;
  return 0;
}

int aclrtSetDevice(int32_t device) {
  set_device_count++;
  device_set = 1;
  current_device = device;
  return 0;
}

int aclrtGetDeviceInfo(uint32_t device, int attr, int64_t *value) {
  if (fail_get_device_info) return fail(fail_get_device_info, "stand-in: attribute not supported");
  switch (attr) {
    case 101: *value = ai_cores + device; return 0;      /* per-device answers: device d has d more cores */
    case 102: *value = cube_cores + device; return 0;
    case 201: *value = vector_cores + 2 * device; return 0;
  }
  return fail(107000, "stand-in: unknown attribute");
}

const char *aclGetRecentErrMsg(void) { return last_error; }

const char *aclrtGetSocName(void) { return "Ascend950PR_standin"; }
"""


def build(directory, name="libascendcl.so", extra_source=""):
    """Compile the stand-in into ``directory``; None where there is no C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    src = directory / "acl_standin.c"
    src.write_text(SOURCE + extra_source)
    so = directory / name
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


class Recorder:
    """Reads the stand-in's records."""

    def __init__(self, lib):
        self.lib = lib

    def int(self, name):
        return ctypes.c_int.in_dll(self.lib, name).value

    def set(self, name, value):
        ctypes.c_int.in_dll(self.lib, name).value = value

    def lookups(self):
        return ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(self.lib, "lookups"))).decode().split()

    def load_sizes(self):
        return list((ctypes.c_size_t * 16).in_dll(self.lib, "load_sizes"))[:min(self.int("load_count"), 16)]

    def load_devices(self):
        return list((ctypes.c_int * 16).in_dll(self.lib, "load_devices"))[:min(self.int("load_count"), 16)]

    def first_image(self, n):
        return bytes((ctypes.c_ubyte * 4096).in_dll(self.lib, "load_bytes"))[:n]

    def launch(self):
        lib = self.lib
        size = ctypes.c_size_t.in_dll(lib, "launch_args_size").value
        return {
            "count": self.int("launch_count"),
            "function": ctypes.c_void_p.in_dll(lib, "launch_function").value,
            "blocks": ctypes.c_uint32.in_dll(lib, "launch_blocks").value,
            "stream": ctypes.c_void_p.in_dll(lib, "launch_stream").value,
            "device": self.int("launch_device"),
            "args": bytes((ctypes.c_ubyte * 512).in_dll(lib, "launch_args"))[:size],
            "num_attrs": self.int("launch_num_attrs"),
            "attr_id": ctypes.c_int32.in_dll(lib, "launch_attr_id").value,
            "attr_value": ctypes.c_uint32.in_dll(lib, "launch_attr_value").value,
            "placeholders": (ctypes.c_void_p.in_dll(lib, "launch_placeholders").value,
                             ctypes.c_size_t.in_dll(lib, "launch_num_placeholders").value),
        }

    def reset(self):
        for name in ("load_count", "lookup_count", "launch_count", "set_device_count", "fail_load", "fail_lookup",
                     "fail_launch", "fail_get_device_info", "device_set", "current_device"):
            self.set(name, 0)
        ctypes.memset(ctypes.addressof(ctypes.c_char.in_dll(self.lib, "lookups")), 0, 4096)


# ----------------------------------------------------------------------------------- a stand-in Ascend store
_SIZES = {"ptr": 8, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
          "uint64": 8, "float32": 4, "float64": 8}


def kernel_spec(symbol, params, device_args, block_dim="num_cores", work_items=None, dyn_ubuf_bytes=0):
    """One entry of spec.kernels (docs/ASCEND.md "Store format"): ``device_args`` are parameter names in device
    order; offsets and sizes follow the documented rule (each argument at a multiple of max(size, 4), the buffer
    rounded up to 8), computed here independently of the loader."""
    index = {p["name"]: i for i, p in enumerate(params)}
    args, offset = [], 0
    for name in device_args:
        p = params[index[name]]
        kind = "ptr" if p["kind"] == "buffer" else "scalar"
        size = 8 if kind == "ptr" else _SIZES[p["ctype"]]
        offset += (-offset) % max(size, 4)
        a = {"kind": kind, "param": index[name], "offset": offset, "size": size}
        if kind == "scalar":
            a["ctype"] = p["ctype"]
        args.append(a)
        offset += size
    k = {"symbol": symbol, "args": args, "args_bytes": offset + (-offset) % 8, "block_dim": block_dim,
         "core_type": "vector", "dyn_ubuf_bytes": dyn_ubuf_bytes}
    if work_items is not None:
        k["work_items"] = work_items
    return k


def write_store(directory, entries, images, status="built", reason=None, arch="dav-3510"):
    """An Ascend store in ``directory``: runtime/summary.json, runtime/<op>.<arch>.json and the binaries
    (``images``: binary name -> bytes). Returns ``directory``."""
    import json
    runtime = directory / "runtime"
    runtime.mkdir(parents=True, exist_ok=True)
    ops = sorted({e["op"] for e in entries})
    summary = {"format": 1, "backend": "ascend", "status": status, "arches": [arch] if status == "built" else [],
               "ops": ops if status == "built" else [], "toolchain": {"tilelang": "0.1.15", "bisheng": "stand-in"}}
    if reason:
        summary["reason"] = reason
    (runtime / "summary.json").write_text(json.dumps(summary))
    for op in ops:
        (runtime / f"{op}.{arch}.json").write_text(json.dumps([e for e in entries if e["op"] == op]))
    for name, image in images.items():
        (directory / name).write_bytes(image)
    return directory


def entry(op, variant, params, kernels, image, arch="dav-3510"):
    import hashlib
    digest = hashlib.sha256(image).hexdigest()
    name = f"{op}-{digest[:12]}.{arch}.aibin"
    e = {"op": op, "key": f"{op}({variant})", "variant": variant, "arch": arch, "binary": name, "sha256": digest,
         "bytes": len(image), "spec": {"spec_version": 1, "backend": "ascend", "params": params, "kernels": kernels}}
    return e, {name: image}
