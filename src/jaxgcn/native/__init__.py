"""The fused C++ CSR kernel: its sources (``kernels/``), its build, the one question whether it
can run (:func:`jaxgcn.native.csr.kernel_status`, asked by the plan only) and its XLA FFI
calls. Imports only :mod:`jaxgcn.host`."""
