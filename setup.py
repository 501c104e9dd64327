"""The one compiled part: models/_cpu_kernels.c, the CPU passes of `attend` torch cannot fuse.

Optional: where no C compiler is found the install goes on without it, and `attend` uses torch's
operations for those passes (models/cpu_kernels.py says which; slower, the same answers within
float32 rounding). Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "models._cpu_kernels",
            sources=["models/_cpu_kernels.c"],
            # -ffp-contract=off: no fused multiply-add, so each target clone (AVX-512, AVX2,
            # plain x86-64) gives the same bits; -O3 vectorises the fixed-lane loops
            extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]
)
