"""The compiled parts: models/_cpu_kernels.c, the CPU passes of `attend` torch cannot fuse, and
service/engine/_postings.c, a swap's BM25 postings merged in one pass.

Optional: where no C compiler is found the install goes on without them, and `attend` uses
torch's operations for those passes (models/cpu_kernels.py says which; slower, the same answers
within float32 rounding), a swap numpy's (service/engine/bm25_postings.py; slower, the same
postings). Everything else is in pyproject.toml.
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
        ),
        Extension(
            "service.engine._postings",
            sources=["service/engine/_postings.c"],
            # the scores are numpy's float64 arithmetic, operation by operation
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
    ]
)
