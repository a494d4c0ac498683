"""Tensor-core USpMM (sparsekit/gpu/uspmm_tc.py) against our CUDA-core kernels, cuSPARSE and cuBLAS.

Run on a GPU::

    python -m experiments.bench_uspmm_tc --table [--dtype float32] [--configs all] [--out DIR]
    python -m experiments.bench_uspmm_tc --sanitize [--dtype float32]  # tiny, for compute-sanitizer
    python -m experiments.bench_uspmm_tc --splits --dtype float16 [--out DIR]   # K split on small grids
    python -m experiments.bench_uspmm_tc --b2 --dtype float16                    # two blocks an SM
    python -m experiments.bench_uspmm_tc --fp32 [--previous FILE.py] [--out DIR] # float32 by density
    python -m experiments.bench_uspmm_tc --wave [--dtype float32] [--out DIR]    # grids of about one wave
    python -m experiments.bench_uspmm_tc --large [--dtype float32] [--out DIR]   # grids of many waves
    python -m experiments.bench_uspmm_tc --wave --only kg [--dtype float32]     # only the K-group settings
    python -m experiments.bench_uspmm_tc --half-wave [--out DIR]                 # float32 grids of half a wave

``--table --configs all`` for both dtypes takes over 100 s on the H100 (compilation included): split it with
``--dtype`` and ``--problems`` (indices into :data:`TABLE_PROBLEMS`) to fit a time limit.

Problems: the USpMM targets' table (:data:`TABLE_PROBLEMS`). Providers: the tensor-core kernel with
its default tunables ("tc") and, with ``--configs all``, the other settings of
:data:`TC_CONFIGS`; ``sparsekit.gpu.uspmm.uspmm(..., config="auto")`` (the autotuner's cached choice, or its heuristic without a
tuning cache: for float16 the tensor-core kernel where it routes there), "auto cuda-core" (the
heuristic's CUDA-core choice, ``tensor_cores=False``); cuSPARSE CSR and dense cuBLAS
through PyTorch (:func:`experiments.bench_uspmm.vendor_launches`: TF32 off for float32).

Each record: median/p10/p90 device time (:func:`sparsekit.timing.measure`, L2 flushed),
TFLOP/s on the stored nonzeros (2 nnz N), ``pct_sol`` = the Roofline's speed of light
(``Problem.sol_s``: the ELL problem on the H100's CUDA-core peak, 67 TFLOP/s float32, 133.8
float16, and 3.35 TB/s) over the time, ``pct_tc_peak`` = the tensor-core work the kernel issues
(the densified product, 2 M K N FLOPs, three times for 3xTF32) over the time, as a share of the
dense tensor-core peak (989.4 TFLOP/s fp16, 494.7 TF32: ``sparsekit.device.PEAKS``), ``correct``
(within the float32-accumulation bound ``Problem.correct`` of the existing benchmark, reduction
K'), ``err_u`` = max |C - C_exact| / (|A| @ |B|) in float32 unit roundoffs (2**-24) and
``err_vs_bound`` = max error / that bound, for the kernels (not the vendors).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone

import numpy as np

#: The tensor-core table's problems: (M, K, N, sparsity).
TABLE_PROBLEMS = [(1024, 1024, 1024, 0.60), (1024, 1024, 16384, 0.60), (1024, 1024, 1024, 0.95),
                  (4096, 4096, 1024, 0.90), (128, 128, 128, 0.60), (1024, 1024, 128, 0.60)]
#: Where the float16 routing of ``config="auto"`` to the tensor cores should stop (sparsity between
#: the table's 60% and 95% at 1024^3): indices 6, 7 for ``--problems``.
TABLE_PROBLEMS += [(1024, 1024, 1024, 0.80), (1024, 1024, 1024, 0.90)]
#: Tensor-core settings per dtype ("tc" is gpu.uspmm_tc.DEFAULTS; "sN": an N-stage pipeline). The float16
#: ones past 48 KB of shared memory (kc 32 and 64, 4 to 6 stages, 64x64 tiles two blocks an SM at 1024^3,
#: 16 warps) run from dynamic shared memory; the float16 default is 64x128 kc 64, 4 stages (experiments/results/
#: uspmm_tc.md, float16, beside the first kernel's 64x128 kc 16, 3 stages, its "tc old default"). The 64x256
#: settings (float16 kc 32, float32 kc 16) are the fastest at N = 16384 and 4096^2 (uspmm_tc.md, Grids of many
#: waves); float32 128x128 kc 16 has 16 warps; the float32 default is 64x128 kc 16, 4 stages.
#: The "b2" settings (two blocks, 16 warps an SM: 128 registers or fewer without spills and at most
#: 104 KB of shared memory, checked offline for sm_90) were timed in uspmm_tc.md's "K split" (``--b2``,
#: ``--splits``): fp16 64x256 b2 and fp32 64x128 b2 the fastest at N = 16384, fp16 32x128 b2 on small grids.
TC_CONFIGS = {
    "float16": {"tc 64x128 k16 w2x4 s6": dict(bm=64, bn=128, kc=16, warps_m=2, warps_n=4, stages=6),
                "tc 64x128 k32 w2x4 s4": dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=4, stages=4),
                "tc 64x128 k64 w2x4 s3": dict(bm=64, bn=128, kc=64, warps_m=2, warps_n=4, stages=3),
                "tc 64x128 k16 w2x4 s3": dict(bm=64, bn=128, kc=16, warps_m=2, warps_n=4, stages=3),
                "tc 64x64 k32 w2x2 s4 b2": dict(bm=64, bn=64, kc=32, warps_m=2, warps_n=2, stages=4, min_blocks=2),
                "tc 128x128 k32 w4x4 s4": dict(bm=128, bn=128, kc=32, warps_m=4, warps_n=4, stages=4),
                "tc 64x256 k32 w2x4 s4": dict(bm=64, bn=256, kc=32, warps_m=2, warps_n=4, stages=4),
                "tc 32x128 k64 w1x8 s4 b2": dict(bm=32, bn=128, kc=64, warps_m=1, warps_n=8, stages=4, min_blocks=2),
                "tc 64x256 k32 w2x4 s4 b2": dict(bm=64, bn=256, kc=32, warps_m=2, warps_n=4, stages=4, min_blocks=2)},
    "float32": {"tc 64x128 k8 w2x4": dict(bm=64, bn=128, kc=8, warps_m=2, warps_n=4),
                "tc 128x128 k8 w2x4": dict(bm=128, bn=128, kc=8, warps_m=2, warps_n=4),
                "tc 128x64 k8 w4x2": dict(bm=128, bn=64, kc=8, warps_m=4, warps_n=2),
                "tc 32x64 k16 w1x2": dict(bm=32, bn=64, kc=16, warps_m=1, warps_n=2),
                "tc 64x128 k8 w2x4 s5": dict(bm=64, bn=128, kc=8, warps_m=2, warps_n=4, stages=5),
                "tc 128x64 k8 w4x2 s4": dict(bm=128, bn=64, kc=8, warps_m=4, warps_n=2, stages=4),
                "tc 128x128 k16 w4x4 s4": dict(bm=128, bn=128, kc=16, warps_m=4, warps_n=4, stages=4),
                "tc 64x256 k16 w2x4 s3": dict(bm=64, bn=256, kc=16, warps_m=2, warps_n=4, stages=3),
                "tc 64x128 k16 w2x4 s4 b2": dict(bm=64, bn=128, kc=16, warps_m=2, warps_n=4, stages=4, min_blocks=2)},
}
#: K-split table (``--splits``): small output grids, N = 128. 1024 x 1024 x 128 60% (16 tiles of 64 x 128)
#: and the ResNet-50 layer shapes of the paper's Table 1 at 81% uniform sparsity (M x K).
SPLIT_PROBLEMS = [(1024, 1024, 128, 0.60)] + [(m, k, 128, 0.81) for m, k in
                                              [(512, 4608), (512, 1024), (512, 2048), (256, 2304), (2048, 512),
                                               (1000, 2048), (128, 1152)]]
SPLITS = (1, 2, 4, 8, 16)
#: Per dtype, the two-blocks-an-SM setting timed with splits on the small grids (32 x 128 tiles for float16).
SPLIT_B2 = {"float16": "tc 32x128 k64 w1x8 s4 b2", "float32": "tc 64x128 k16 w2x4 s4 b2"}
#: ``--b2``: the "b2" settings of :data:`TC_CONFIGS` against the default at 1024^3 and N = 16384, 60%.
B2_PROBLEMS = [(1024, 1024, 1024, 0.60), (1024, 1024, 16384, 0.60)]
#: ``--fp32``: float32 (3xTF32, A split once by the scatter) by density at 1024^3, and at N = 16384 and 4096^2,
#: for the routing of float32 between the tensor cores and the CUDA cores.
FP32_PROBLEMS = ([(1024, 1024, 1024, s) for s in (0.60, 0.70, 0.80, 0.85, 0.90)]
                 + [(1024, 1024, 16384, 0.60), (4096, 4096, 1024, 0.90)])
#: ``--wave``: grids of about one wave of 64 x 128 tiles (1024^3: 128 tiles on 132 SMs, so one block of 8 warps
#: an SM however many would fit), where a K split or smaller tiles give each SM more blocks; per dtype.
WAVE_PROBLEMS = {"float32": [(1024, 1024, 1024, s) for s in (0.60, 0.70, 0.80, 0.85)] + [(768, 768, 1024, 0.60),
                             (1024, 1024, 16384, 0.60)],                     # many waves, for comparison
                 "float16": [(1024, 1024, 1024, 0.60), (1024, 1024, 1024, 0.90), (768, 768, 1024, 0.60),
                             (1024, 1024, 512, 0.60)]}
#: ``--wave``'s settings per dtype: (name, tunables) with the splits each is timed at.
WAVE_CONFIGS = {"float32": [("tc", {}, (1, 2, 3, 4)),
                            ("tc 64x64 k16 w2x2 s4 b3", dict(bm=64, bn=64, kc=16, warps_m=2, warps_n=2, stages=4,
                                                             min_blocks=3), (1, 2)),
                            # larger warp tiles: fewer fragment loads and B splits per MMA
                            # (uspmm_tc.md, Grids of many waves)
                            ("tc 64x128 k16 w1x4 s4 b3", dict(bm=64, bn=128, kc=16, warps_m=1, warps_n=4, stages=4,
                                                              min_blocks=3), (1, 2)),
                            ("tc 64x128 k16 w2x2 s4 b2", dict(bm=64, bn=128, kc=16, warps_m=2, warps_n=2, stages=4,
                                                              min_blocks=2), (1, 2)),
                            ("tc 128x128 k16 w2x4 s3 b2", dict(bm=128, bn=128, kc=16, warps_m=2, warps_n=4, stages=3,
                                                               min_blocks=2), (1, 2)),
                            ("tc 64x256 k16 w1x4 s3", dict(bm=64, bn=256, kc=16, warps_m=1, warps_n=4, stages=3),
                             (1, 2)),
                            ("tc 64x128 k32 w2x4 s3", dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=4, stages=3), (1,)),
                            # K groups ("kgN": N groups of warps_m x warps_n warps, each a share of every
                            # chunk's K steps): 8 warps of 64 x 32 or 32 x 64 (uspmm_tc.md, Grids of about one
                            # wave: K groups)
                            ("tc 64x128 k16 w1x4 s4 kg2", dict(bm=64, bn=128, kc=16, warps_m=1, warps_n=4, stages=4,
                                                               min_blocks=1, kgroups=2), (1, 2)),
                            ("tc 64x128 k16 w1x4 s4 kg2 b2", dict(bm=64, bn=128, kc=16, warps_m=1, warps_n=4,
                                                                  stages=4, kgroups=2), (1,)),
                            ("tc 64x128 k32 w1x4 s3 kg2", dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=4, stages=3,
                                                               min_blocks=1, kgroups=2), (1, 2)),
                            ("tc 64x128 k16 w2x2 s4 kg2", dict(bm=64, bn=128, kc=16, warps_m=2, warps_n=2, stages=4,
                                                               min_blocks=1, kgroups=2), (1,)),
                            ("tc 64x128 k32 w2x2 s3 kg2", dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=2, stages=3,
                                                               min_blocks=1, kgroups=2), (1,)),
                            # four groups of 2 warps of 64 x 64 (one K step a group per chunk of 32)
                            ("tc 64x128 k32 w1x2 s3 kg4", dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=3,
                                                               min_blocks=1, kgroups=4), (1,)),
                            ("tc 64x128 k32 w1x2 s4 kg4", dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=4,
                                                               min_blocks=1, kgroups=4), (1,)),
                            ("tc 64x128 k32 w1x2 s5 kg4", dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=5,
                                                               min_blocks=1, kgroups=4), (1,)),
                            ("tc 64x128 k32 w1x2 s6 kg4", dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=6,
                                                               min_blocks=1, kgroups=4), (1,)),
                            # four groups of 4 warps of 32 x 64: 16 warps an SM (4 a scheduler, the one-wave
                            # setting has 2 and is latency-bound); sm_90 128 registers, no spill (compiled
                            # offline; with lean 12 bytes of spill); timed on the H100: 5-9% (s4) and 14-18% (s3)
                            # slower than w1x2 s4 kg4 (its row: uspmm_tc.md, Grids of about one wave: K groups)
                            ("tc 64x128 k32 w2x2 s3 kg4", dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=2, stages=3,
                                                               min_blocks=1, kgroups=4), (1,)),
                            ("tc 64x128 k32 w2x2 s4 kg4", dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=2, stages=4,
                                                               min_blocks=1, kgroups=4), (1,))],
                "float16": [("tc", {}, (1, 2, 3, 4)),
                            ("tc 64x64 k32 w2x2 s4 b2", TC_CONFIGS["float16"]["tc 64x64 k32 w2x2 s4 b2"], (1, 2)),
                            ("tc 32x128 k64 w1x8 s4 b2", TC_CONFIGS["float16"]["tc 32x128 k64 w1x8 s4 b2"], (1, 2)),
                            ("tc 64x128 k64 w1x4 s4 kg2", dict(bm=64, bn=128, kc=64, warps_m=1, warps_n=4, stages=4,
                                                               kgroups=2), (1, 2)),
                            ("tc 64x128 k32 w1x4 s4 kg2", dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=4, stages=4,
                                                               kgroups=2), (1,)),
                            ("tc 64x128 k64 w1x2 s4 kg4", dict(bm=64, bn=128, kc=64, warps_m=1, warps_n=2, stages=4,
                                                               kgroups=4), (1,))]}
#: ``--large``: grids of many waves (where a ``--wave`` run found float32 64 x 256 tiles with
#: 64 x 64 warp tiles 22% faster than the default at N = 16384): larger warp tiles, per dtype.
LARGE_PROBLEMS = {d: [(1024, 1024, 4096, 0.60), (1024, 1024, 16384, 0.60), (4096, 4096, 1024, 0.60)]
                  for d in ("float32", "float16")}
LARGE_CONFIGS = {
    "float32": [("tc", {}, (1,)),
                ("tc 64x256 k16 w1x4 s3 b2", dict(bm=64, bn=256, kc=16, warps_m=1, warps_n=4, stages=3), (1,)),
                ("tc 64x256 k16 w1x4 s4 b2", dict(bm=64, bn=256, kc=16, warps_m=1, warps_n=4, stages=4), (1,)),
                ("tc 64x256 k8 w1x4 s4 b2", dict(bm=64, bn=256, kc=8, warps_m=1, warps_n=4, stages=4), (1,)),
                ("tc 128x256 k16 w2x4 s3", dict(bm=128, bn=256, kc=16, warps_m=2, warps_n=4, stages=3, min_blocks=1),
                 (1,)),
                ("tc 128x128 k16 w2x2 s3 b2", dict(bm=128, bn=128, kc=16, warps_m=2, warps_n=2, stages=3), (1,)),
                ("tc 64x256 k32 w1x4 s3", dict(bm=64, bn=256, kc=32, warps_m=1, warps_n=4, stages=3, min_blocks=1),
                 (1,)),
                ("tc 64x128 k16 w1x4 s4 kg2 b2", dict(bm=64, bn=128, kc=16, warps_m=1, warps_n=4, stages=4, kgroups=2),
                 (1,)),
                ("tc 64x256 k16 w1x4 s4 kg2", dict(bm=64, bn=256, kc=16, warps_m=1, warps_n=4, stages=4, min_blocks=1,
                                                   kgroups=2), (1,))],
    "float16": [("tc", {}, (1,)),
                ("tc 64x256 k32 w2x4 s4 b2", TC_CONFIGS["float16"]["tc 64x256 k32 w2x4 s4 b2"], (1,)),
                ("tc 64x256 k32 w1x4 s4", dict(bm=64, bn=256, kc=32, warps_m=1, warps_n=4, stages=4), (1,)),
                ("tc 64x256 k64 w1x4 s3", dict(bm=64, bn=256, kc=64, warps_m=1, warps_n=4, stages=3), (1,)),
                ("tc 128x256 k32 w2x4 s3", dict(bm=128, bn=256, kc=32, warps_m=2, warps_n=4, stages=3), (1,)),
                ("tc 64x256 k32 w1x4 s4 kg2", dict(bm=64, bn=256, kc=32, warps_m=1, warps_n=4, stages=4, kgroups=2),
                 (1,))]}
#: ``sparsekit.tune``'s float32 one-wave (``TC_ONE_WAVE``) and many-wave (``TC_LARGE``) settings.
ROUTED_ONE_WAVE = dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=4, min_blocks=1, kgroups=4)
ROUTED_LARGE = dict(bm=64, bn=256, kc=16, warps_m=1, warps_n=4, stages=4)
#: ``--half-wave`` (float32): output grids of ``sms / 4`` to ``sms / 2`` tiles of 64 x 128, where
#: ``sparsekit.tune.TC_HALF_WAVE`` is routed: the one-wave setting (``ROUTED_ONE_WAVE``:
#: ``sparsekit.tune.TC_ONE_WAVE``) at 1, 2 (routed) and 4 K splits, against the defaults with 1 and 2
#: (routed before; experiments/results/uspmm_tc.md, Grids of half a wave: the split sum's L2 loads).
HALF_WAVE_PROBLEMS = [(512, 512, 1024, 0.60), (1024, 1024, 512, 0.60), (512, 512, 1024, 0.80), (1024, 1024, 512, 0.80)]
HALF_WAVE_CONFIGS = [("tc", {}, (1, 2)), ("tc one-wave", ROUTED_ONE_WAVE, (1, 2, 4))]
#: A second setting per dtype for the sanitizers and the GPU tests (several warps per row segment).
ALT = {"float16": dict(bm=64, bn=64, kc=32, warps_m=2, warps_n=2),
       "float32": dict(bm=128, bn=64, kc=8, warps_m=4, warps_n=2)}
#: A float16 setting past 48 KB (dynamic shared memory) for the sanitizers and the GPU tests.
DYNAMIC = dict(bm=64, bn=128, kc=32, warps_m=2, warps_n=4, stages=4)
#: K-group settings per dtype for the sanitizers and the GPU tests: two groups of 4 warps (64 x 32 warp
#: tiles, as timed in ``--wave``), three groups of 2 warps (a chunk of 3 K steps) and four groups of 2 warps
#: of 64 x 64 (the ``--wave`` settings "tc 64x128 k32 w1x2 s4 kg4" and "tc 64x128 k64 w1x2 s4 kg4").
KGROUPS = {"float32": [dict(bm=64, bn=128, kc=16, warps_m=1, warps_n=4, stages=4, kgroups=2),
                       dict(bm=64, bn=64, kc=24, warps_m=1, warps_n=2, stages=3, min_blocks=1, kgroups=3),
                       dict(bm=64, bn=128, kc=32, warps_m=1, warps_n=2, stages=4, min_blocks=1, kgroups=4)],
           "float16": [dict(bm=64, bn=128, kc=64, warps_m=1, warps_n=4, stages=4, kgroups=2),
                       dict(bm=64, bn=64, kc=48, warps_m=1, warps_n=2, stages=3, kgroups=3),
                       dict(bm=64, bn=128, kc=64, warps_m=1, warps_n=2, stages=4, kgroups=4)]}
U32 = 2.0 ** -24


def error_stats(p, got) -> dict:
    """``err_u`` (max error over |A| @ |B|, in float32 unit roundoffs) and ``err_vs_bound`` (max
    error over ``Problem.correct``'s bound, reduction K')."""
    exact, scale = p.exact()
    err = np.abs(np.asarray(got, dtype=np.float64) - exact)
    u_out = np.finfo(p.dtype).eps / 2
    bound = p.ell.kprime * U32 * scale + 2 * u_out * np.abs(exact) + np.finfo(p.dtype).smallest_subnormal
    with np.errstate(divide="ignore", invalid="ignore"):
        err_u = np.where(scale > 0, err / scale, 0.0).max() / U32
    return dict(err_u=float(err_u), err_vs_bound=float((err / bound).max()))


def tc_work_flops(p) -> float:
    """Tensor-core FLOPs the kernel issues: the densified product, three times for 3xTF32."""
    return 2.0 * p.m * p.k * p.n * (1 if p.dtype == np.float16 else 3)


def bench_problem(m, k, n, sparsity, dtype, *, configs="default", repeat=30, vendors=True) -> list[dict]:
    """One record per provider for one problem (see the module docstring)."""
    from sparsekit.bench.uspmm import Problem, vendor_launches
    from sparsekit.arrays import to_host
    from sparsekit.gpu.uspmm import uspmm as uspmm_simt
    from sparsekit.gpu.uspmm_tc import uspmm as uspmm_tc
    from sparsekit.device import PEAKS
    from sparsekit.timing import measure
    from sparsekit.tune import heuristic, resolve
    p = Problem(m, k, n, sparsity, dtype)
    sol = p.sol_s()
    peak = PEAKS["H100"].fp16_tensor if p.dtype == np.float16 else PEAKS["H100"].tf32_tensor
    tcs = {"tc": {}}
    if configs == "all":
        tcs.update(TC_CONFIGS[p.dtype.name])
    launches = {name: (lambda cfg=cfg: uspmm_tc(p.dell, p.b, **cfg)) for name, cfg in tcs.items()}
    launches["auto"] = lambda: uspmm_simt(p.dell, p.b, config="auto")
    simt = heuristic(p.m, p.k, p.n, p.ell.kprime, p.dtype, "C", tensor_cores=False)
    launches["auto cuda-core"] = lambda: uspmm_simt(p.dell, p.b, **simt)
    chosen = dict(tcs, auto=resolve("auto", p.dell, p.n, "C"), **{"auto cuda-core": simt})
    if vendors:
        launches.update(vendor_launches(p, coo=False))
    records = []
    for name, launch in launches.items():
        rec = dict(m=m, k=k, n=n, sparsity=sparsity, dtype=p.dtype.name, kprime=p.ell.kprime, provider=name,
                   config=chosen.get(name))
        try:
            got = to_host(launch())
            again = to_host(launch())
            t = measure(launch, repeat=repeat, warmup=2)
        except Exception as err:  # a provider that cannot run this problem: say why, keep going
            records.append(dict(rec, error=f"{type(err).__name__}: {err}"))
            print(f"  {name}: {type(err).__name__}: {err}", flush=True)
            continue
        rec.update(median_us=t.median_s * 1e6, p10_us=t.p10_s * 1e6, p90_us=t.p90_s * 1e6,
                   tflops=p.flops / t.median_s / 1e12, pct_sol=100 * sol / t.median_s, correct=p.correct(got))
        if "torch" not in name:
            rec.update(error_stats(p, got), bit_identical=bool((got.view(np.uint8) == again.view(np.uint8)).all()))
        if name.startswith("tc"):
            rec["pct_tc_peak"] = 100 * tc_work_flops(p) / t.median_s / peak
        records.append(rec)
    ref = {r["provider"]: r.get("median_us") for r in records}.get("cuSPARSE CSR (torch)")
    for r in records:
        if ref and r.get("median_us"):
            r["speedup_vs_cusparse_csr"] = ref / r["median_us"]
    return records


def check_providers(p, launches: dict) -> list[dict]:
    """Run every launch twice (compiling it): one record per provider with ``correct`` and, for our
    kernels, the error statistics and whether the repeat is bit-identical (or the error). With a
    "tc previous default" provider, "tc default" records ``same_as_previous``: both results bit-identical."""
    from sparsekit.arrays import to_host
    recs = []
    first = {}
    for name, launch in launches.items():
        rec = dict(m=p.m, k=p.k, n=p.n, sparsity=p.sparsity, dtype=p.dtype.name, kprime=p.ell.kprime, provider=name)
        try:
            got = to_host(launch())
            again = to_host(launch())
        except Exception as err:  # a provider that cannot run this problem: say why, keep going
            recs.append(dict(rec, error=f"{type(err).__name__}: {err}"))
            continue
        rec["correct"] = p.correct(got)
        if "torch" not in name:
            rec.update(error_stats(p, got), bit_identical=bool((got.view(np.uint8) == again.view(np.uint8)).all()))
        first[name] = got
        recs.append(rec)
    pairs = {"tc default": "tc previous default"}
    for rec in recs:
        base = pairs.get(rec["provider"])
        if base in first and rec["provider"] in first:
            rec["same_as_previous"] = bool((first[rec["provider"]].view(np.uint8) == first[base].view(np.uint8)).all())
    return recs


def load_previous(path: str):
    """The module in the file ``path`` (a copy of an earlier ``sparsekit/gpu/uspmm_tc.py``, for ``--previous``)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("uspmm_tc_previous", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split_launches(p, which: str, previous=None, only=None) -> dict:
    """name -> launch for ``--splits`` (``which="splits"``: the default with :data:`SPLITS`, the
    :data:`SPLIT_B2` setting with splits 1 to 8, ``config="heuristic"``, the vendors), ``--b2``
    (``which="b2"``: the default and the "b2" settings of :data:`TC_CONFIGS`) or ``--fp32``
    (``which="fp32"``: the default, ``previous``'s default (a module, or None), ``config="auto"``,
    the heuristic's CUDA-core choice, the vendors) or ``--wave`` / ``--large`` / ``--half-wave`` (``which="wave"`` /
    ``"large"`` / ``"half_wave"``: :data:`WAVE_CONFIGS` / :data:`LARGE_CONFIGS` / :data:`HALF_WAVE_CONFIGS` at their
    splits, ``config="auto"``, the vendors;
    ``only``: a list of substrings, to keep only the settings whose name holds one, and the default "tc")."""
    from sparsekit.bench.uspmm import vendor_launches
    from sparsekit.gpu.uspmm import uspmm as uspmm_simt
    from sparsekit.gpu.uspmm_tc import uspmm as uspmm_tc
    from sparsekit.tune import heuristic
    dt = p.dtype.name
    if which in ("wave", "large", "half_wave"):
        configs = {"wave": WAVE_CONFIGS.get(dt), "large": LARGE_CONFIGS.get(dt), "half_wave": HALF_WAVE_CONFIGS}[which]
        out = {f"{name} splits={s}": (lambda cfg=cfg, s=s: uspmm_tc(p.dell, p.b, splits=s, **cfg))
               for name, cfg, splits in configs for s in splits
               if not only or name == "tc" or any(x in name for x in only)}
        out["auto"] = lambda: uspmm_simt(p.dell, p.b, config="auto")
        out.update(vendor_launches(p, coo=False))
        return out
    if which == "fp32":
        out = {"tc default": lambda: uspmm_tc(p.dell, p.b)}
        if previous is not None:
            out["tc previous default"] = lambda: previous.uspmm(p.dell, p.b)
        out["auto"] = lambda: uspmm_simt(p.dell, p.b, config="auto")
        simt = heuristic(p.m, p.k, p.n, p.ell.kprime, p.dtype, "C", tensor_cores=False)
        out["auto cuda-core"] = lambda: uspmm_simt(p.dell, p.b, **simt)
        out.update(vendor_launches(p, coo=False))
        return out
    if which == "b2":
        cfgs = {"tc default": {}}
        cfgs.update({name: cfg for name, cfg in TC_CONFIGS[dt].items() if name.endswith("b2")})
        return {name: (lambda cfg=cfg: uspmm_tc(p.dell, p.b, **cfg)) for name, cfg in cfgs.items()}
    out = {f"tc splits={s}": (lambda s=s: uspmm_tc(p.dell, p.b, splits=s)) for s in SPLITS}
    b2 = TC_CONFIGS[dt][SPLIT_B2[dt]]
    out.update({f"{SPLIT_B2[dt]} splits={s}": (lambda s=s: uspmm_tc(p.dell, p.b, splits=s, **b2)) for s in SPLITS[:4]})
    out["heuristic"] = lambda: uspmm_simt(p.dell, p.b, config="heuristic")
    out.update(vendor_launches(p, coo=False))
    return out


def split_table(which: str, dtype: str, *, repeat: int, out=None, ready=None, go=None, previous=None,
                only=None) -> list[dict]:
    """``--splits`` / ``--b2`` / ``--fp32`` / ``--wave`` / ``--large`` for one dtype: records, printed as one line each and kept as
    JSON in ``out``."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.device import info
    probs = {"splits": SPLIT_PROBLEMS, "b2": B2_PROBLEMS, "fp32": FP32_PROBLEMS, "wave": WAVE_PROBLEMS.get(dtype),
             "large": LARGE_PROBLEMS.get(dtype), "half_wave": HALF_WAVE_PROBLEMS}[which]
    problems = [Problem(m, k, n, s, dtype) for (m, k, n, s) in probs]
    launches = {i: split_launches(p, which, previous, only) for i, p in enumerate(problems)}
    records = [check_providers(p, launches[i]) for i, p in enumerate(problems)]   # compile and check all,
    if ready:                                                                       # then time (a driver can
        open(ready, "w").close()                                                    # keep the GPU to us)
    while go and not os.path.exists(go):
        time.sleep(0.1)
    from sparsekit.timing import measure
    flat = []
    for i, recs in enumerate(records):
        for rec in recs:
            if "error" not in rec:
                t = measure(launches[i][rec["provider"]], repeat=repeat, warmup=2)
                rec.update(median_us=t.median_s * 1e6, p10_us=t.p10_s * 1e6, p90_us=t.p90_s * 1e6)
            flat.append(rec)
            print(rec["dtype"], rec["m"], rec["k"], rec["n"], rec["sparsity"], rec["provider"],
                  "%.1f" % rec["median_us"] if "median_us" in rec else rec.get("error", "")[:80],
                  rec.get("correct"), rec.get("bit_identical"), rec.get("same_as_previous", ""), flush=True)
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"{which}_{dtype}.json"), "w") as f:
            json.dump(dict(device=info().name, date=f"{datetime.now(timezone.utc):%Y-%m-%d}",
                           argv=sys.argv, results=flat), f, indent=1, default=str)
    return flat


def sanitize_case(dtypes=("float32", "float16"), kgroups_only: bool = False) -> None:
    """The kernel once per dtype (of ``dtypes``) at small odd shapes (for compute-sanitizer): several K
    chunks and both buffers, partial row and column tiles, the element-wise B path (N odd) and the
    16-byte one, K splits (3 and 2 blocks per tile: partials, tickets, the fixed-order sum), K groups
    (:data:`KGROUPS`: two, three and four groups, the groups' sum through shared memory; two and four with a K
    split);
    and float32's routed many-wave setting (:data:`ROUTED_LARGE`); ``kgroups_only``: only the K groups (the
    kernel without groups is unchanged by them)."""
    from sparsekit.bench.uspmm import Problem
    from sparsekit.gpu.uspmm_tc import uspmm
    for dtype in map(np.dtype, dtypes):
        for shape in [(77, 45, 37, 0.6), (70, 300, 136, 0.7)]:
            p = Problem(*shape, dtype)
            kg = KGROUPS[dtype.name]
            plain = (dict(), ALT[dtype.name], dict(splits=3), dict(ALT[dtype.name], splits=2)) \
                + ((DYNAMIC,) if dtype == np.float16 else (ROUTED_LARGE,))
            split_groups = (dict(kg[0], splits=2), dict(kg[2], splits=2))
            cfgs = (() if kgroups_only else plain) + (kg[0], kg[1], kg[2]) + split_groups
            for cfg in cfgs:
                assert p.correct(uspmm(p.dell, p.b, **cfg).copy_to_host()), (shape, dtype, cfg)
    print("sanitize case: the tensor-core kernel ran and matched")


def geomean_speedups(records) -> dict:
    """Per dtype and provider, the geometric mean of the speedup over cuSPARSE CSR across problems."""
    out = {}
    for dt in sorted({r["dtype"] for r in records}):
        for prov in sorted({r["provider"] for r in records if r["dtype"] == dt}):
            s = [r["speedup_vs_cusparse_csr"] for r in records
                 if r["dtype"] == dt and r["provider"] == prov and "speedup_vs_cusparse_csr" in r]
            if s:
                out[f"{dt} {prov}"] = (float(np.exp(np.mean(np.log(s)))), len(s))
    return out


KEYS = ["m", "k", "n", "sparsity", "dtype", "provider", "median_us", "p10_us", "p90_us", "tflops", "pct_sol",
        "pct_tc_peak", "speedup_vs_cusparse_csr", "correct", "bit_identical", "err_u", "err_vs_bound"]


def main(argv=None) -> int:
    from experiments.bench_uspmm import exit_status
    from sparsekit.bench.uspmm import markdown
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", action="store_true", help="the USpMM targets' problems, every provider")
    ap.add_argument("--configs", choices=["default", "all"], default="default",
                    help="tensor-core settings: the default per dtype, or also TC_CONFIGS")
    ap.add_argument("--problems", help="indices into TABLE_PROBLEMS, comma-separated (default: all)")
    ap.add_argument("--sanitize", action="store_true", help="the kernel once, tiny (compute-sanitizer)")
    ap.add_argument("--splits", action="store_true", help="K-split table: SPLIT_PROBLEMS x SPLITS and baselines")
    ap.add_argument("--b2", action="store_true", help="two-blocks-an-SM settings against the default (B2_PROBLEMS)")
    ap.add_argument("--fp32", action="store_true", help="float32 by density (FP32_PROBLEMS) against the vendors")
    ap.add_argument("--wave", action="store_true", help="grids of about one wave: K splits, smaller tiles (WAVE_PROBLEMS)")
    ap.add_argument("--large", action="store_true", help="grids of many waves: larger warp tiles (LARGE_PROBLEMS)")
    ap.add_argument("--half-wave", action="store_true", help="float32 grids of half a wave: the one-wave setting "
                    "with 1, 2 (routed) and 4 splits against the defaults with splits (HALF_WAVE_PROBLEMS)")
    ap.add_argument("--previous", help="with --fp32: a copy of an earlier sparsekit/gpu/uspmm_tc.py, timed and compared too")
    ap.add_argument("--only", action="append", help="with --wave/--large: time only the settings whose name holds "
                                                   "this (repeatable), and the default 'tc'; with --sanitize, "
                                                   "'kg': only the K-group settings")
    ap.add_argument("--ready", help="with --splits/--b2/--fp32/--wave/--large: touch this file when every provider is checked")
    ap.add_argument("--go", help="with --splits/--b2/--fp32/--wave/--large: wait for this file before timing")
    ap.add_argument("--dtype", choices=["float32", "float16"], action="append", help="dtype(s) (default: both)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", help="folder for the JSON records")
    args = ap.parse_args(argv)
    if args.sanitize:
        sanitize_case(args.dtype or ("float32", "float16"), kgroups_only=args.only == ["kg"])
        return 0
    which = next((w for w in ("splits", "b2", "fp32", "wave", "large", "half_wave") if getattr(args, w)), None)
    if which:
        previous = load_previous(args.previous) if args.previous else None
        recs = []
        for d in ["float32"] if which in ("fp32", "half_wave") else args.dtype or ["float32", "float16"]:
            recs += split_table(which, d, repeat=args.repeat, out=args.out, ready=args.ready, go=args.go,
                                previous=previous, only=args.only)
        ours = [r for r in recs if "torch" not in r["provider"]]   # (cuSPARSE float16 misses the bound: reported)
        return 0 if all(r.get("correct", True) and r.get("bit_identical", True) and r.get("same_as_previous", True)
                        for r in ours) else 1
    from sparsekit.device import info
    dev = info()
    stamp = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    print(f"device: {dev.name}; date {stamp}", flush=True)
    probs = TABLE_PROBLEMS if not args.problems else [TABLE_PROBLEMS[int(i)] for i in args.problems.split(",")]
    records = []
    for d in args.dtype or ["float32", "float16"]:
        for (m, k, n, s) in probs:
            recs = bench_problem(m, k, n, s, d, configs=args.configs, repeat=args.repeat)
            records += recs
            print(markdown(recs, KEYS), flush=True)
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                with open(os.path.join(args.out, "bench_uspmm_tc.json"), "w") as f:
                    json.dump(dict(device=dev.name, date=stamp, argv=sys.argv, results=records), f, indent=1,
                              default=str)
    print(markdown(records, KEYS), flush=True)
    for name, (g, cnt) in geomean_speedups(records).items():
        print(f"geomean speedup over cuSPARSE CSR, {name}: {g:.3g} ({cnt} problems)")
    return exit_status(records)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
