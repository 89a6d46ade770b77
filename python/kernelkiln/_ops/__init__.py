"""Op plumbing: what every op module shares and the loader does not know about.

``checks`` (argument validation with errors that name the argument), ``outputs`` (cheap output allocation for the
launch plans), ``error_flags`` (host-mapped error words the kernels report bad input through), ``launch`` (variant
lookup through the op contracts and launches with arguments bound by name) and ``torch_ops`` (the torch.library
registry). The loader (kernelkiln._runtime) knows kernels, launch specs and the driver, nothing of ops.
"""
