"""Tutorial 9: shared-memory banks, and sparse rows ordered so that a warp's gathers do not collide.

What you will learn
-------------------
1. shared memory is 32 banks of 4-byte words; a warp's load is served in *passes*, as many as the most
   distinct words one bank holds among the 32 addresses (lanes reading the same word share its pass). Three
   loads of 32 half-precision values: consecutive (one pass), 64 halves apart (every lane in bank 0: 32
   passes), random (about three);
2. the decode kernel at ``N = 1`` (``_shared_kernel`` of ``sparsekit/gpu/spmm_ell_rows.py``, the route of
   ``uspmm`` and of ``SparseLinear`` for one token) copies ``x`` into shared memory, then every kept weight
   gathers its ``x[col]``. Lane ``L`` reads 8 entries of the row at a time, so one gather instruction reads
   the entries at positions ``256 s + 8 L + p`` (:func:`~sparsekit.reference.spmm_ell_rows.gather_groups`). In
   column order their columns are as good as random: about three passes a gather, which is what Nsight Compute
   measured on the H200 (1.35 M wavefronts for 0.46 M gathers at 14336x4096, 80 %);
3. a row's sum does not care in which order its entries are stored, so the layout can choose it:
   :func:`~sparsekit.reference.spmm_ell_rows.gather_order` gives each gather one entry of every bank where the
   row allows (:func:`~sparsekit.reference.spmm_ell_rows.gather_passes` is the model it is built for);
4. the order computed on the device (``sparsekit.gpu.spmm_ell_rows.gather_order``, one thread a row) is the
   reference's, and the product on the reordered rows equals the reference, on the GPU or (at toy size) the
   CUDA simulator;
5. a kernel's floor: the same grid reading the same bytes and doing nothing else
   (``sparsekit.gpu.spmm_ell_rows.read_rows``). The distance to it is what the kernel's own work costs;
6. below the floor only fewer bytes help: compact ELL rows (``sparsekit/reference/spmm_ell_compact.py``, 3.25
   bytes a kept weight instead of 4) sort each row's columns into chunks of 8 under one 16-bit base, and sorted
   columns collide in the banks again; inside a chunk the slots may come in any order, so the conversion picks
   one for the banks (:func:`~sparsekit.reference.spmm_ell_compact.slot_order`).

What the GPU then said (H200, ``experiments/results/uspmm_decode.md``): the order cut the kernel's bank conflicts
8.5x and left its time where it was. Its warps had been waiting on their global loads of values and columns all
along (Nsight Compute's long scoreboard: 14 of 22 cycles); shared memory's short scoreboard held 1.4. A model tells
you what a change can remove; only the profile's stall reasons tell you whether that was what the time was spent
on. The order did pay a little where ``x^T``'s rows are gathered through L1 (N = 8: 0-10 %), so it stays. On
compact rows, whose sorted chunks had crowded about three passes into a gather, ``slot_order`` was worth 3-8 %
at most points (1.01-1.19x -> 1.10-1.17x the padded rows' speed at 50-80 %): enough for ``SparseLinear`` to read
compact rows at batch 1 below 87.5 % sparsity.

Run it: ``python tutorials/09_shared_memory_banks.py`` (``--quick`` for toy sizes).
"""
from __future__ import annotations

import os
import sys

import numpy as np

#: Step 3's table: columns and sparsities (the Llama layer widths).
WIDTHS, SPARSITIES = (4096, 14336), (0.5, 0.7, 0.8, 0.9)
#: Step 5's measurement, quoted (the simulator cannot time it).
FLOOR_H200 = ("at 14336x4096, 80 %, a read of the rows took 14.3 us and the product 16.2 us (4096x14336: 13.5 "
              "against 14.9); at 90 % 8.2 against 10.4. Below the floor only fewer bytes help: 4 a kept weight "
              "in these rows.")
#: Step 6's measurement, quoted: compact rows with each chunk's slots in column order against the padded rows.
COMPACT_H200 = ("with each chunk's slots in column order, 19 % fewer bytes bought 1.01-1.19x the padded rows' speed "
                "at 50-80 % and 0.94-1.00x at 90 % (Llama shapes, bfloat16): the bytes saved came back as time in the "
                "gathers (about three passes each) and in a third load a chunk. In slot_order: 1.10-1.17x at 50-80 %, "
                "0.97-1.06x at 90 % (`python -m experiments.bench_sparse_linear --compact`), so a SparseLinear reads "
                "compact rows at batch 1 below 87.5 % sparsity.")
#: Largest max |kernel - reference| / max |reference| accepted in step 4: float32 sums in another order,
#: each rounded once to bfloat16 (2^-8 of the largest output, with room).
TOLERANCE = 1e-2


def one_gather(columns: np.ndarray, k: int) -> np.ndarray:
    """A row (``1 x 256``) whose first gather reads ``columns`` (32 of them, lane ``L`` at position ``8 L``), the
    other positions padding: :func:`gather_passes` of it is that one gather's passes."""
    row = np.full((1, 256), k, dtype=np.uint16)
    row[0, ::8] = columns
    return row


def random_rows(m: int, k: int, sparsity: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """A random ``m x k`` bfloat16 weight pruned to uniform sparsity (:func:`sparsekit.prune.uniform`: every row
    keeps its largest ``|w|``, random columns here) as padded ELL rows, each row's columns ascending."""
    from sparsekit.checks import BFLOAT16
    from sparsekit.prune import uniform
    from sparsekit.reference.spmm_ell_rows import ell_rows_from_dense

    w = rng.standard_normal((m, k)).astype(np.float32)
    return ell_rows_from_dense(np.where(uniform(w, sparsity), w, 0).astype(BFLOAT16))


def banks_of(columns: np.ndarray, k: int) -> str:
    """How many of a gather's columns fall in each bank (0-31), a digit a bank ("*": ten or more)."""
    counts = np.bincount((columns[columns < k].astype(np.int64) // 2) % 32, minlength=32)
    return "".join(str(c) if c < 10 else "*" for c in counts)


def first(values, n: int = 4) -> str:
    return ", ".join(str(int(v)) for v in values[:n]) + ", ..."


def main(quick: bool = False) -> dict:
    from sparsekit.gpu import spmm_ell_rows as kernels
    from sparsekit.reference.spmm_ell_rows import bank_balanced, gather_groups, gather_order, gather_passes
    from sparsekit.reference.spmm_ell_rows import read_rows
    from sparsekit.reference.spmm_ell_rows import spmm_ell_rows_linear as reference

    rng = np.random.default_rng(0)
    out = {}

    # Step 1. Passes of a warp's load: the busiest bank's distinct words.
    k = 4096
    loads = {"consecutive": np.arange(32), "64 halves apart": np.arange(32) * 64,
             "random": rng.choice(k, 32, replace=False)}
    print("Step 1: a warp loads 32 halves of x (2 bytes each) from shared memory: word col // 2, bank (col // 2) % 32")
    for name, cols in loads.items():
        passes = gather_passes(one_gather(cols, k), k)
        print(f"  {name:16s} columns {first(cols)}: {passes:.0f} pass(es); per bank {banks_of(cols, k)}")
        out[name] = passes
    assert out["consecutive"] == 1 and out["64 halves apart"] == 32 and out["random"] >= 2

    # Step 2. The decode kernel's gathers on a row in column order.
    values, indices = random_rows(1, k, 0.8, rng)
    groups = gather_groups(indices.shape[1])
    gather0 = indices[0, groups[0]]
    print(f"\nStep 2: one row of a {k}-column weight at 80 % ({indices.shape[1]} entries, {len(groups)} gathers): "
          f"gather 0 reads positions {first(groups[0])}")
    print(f"  in column order its columns are {first(gather0)}; per bank {banks_of(gather0, k)}: "
          f"{gather_passes(one_gather(gather0, k), k):.0f} passes; the row's gathers "
          f"{gather_passes(indices, k):.2f} passes on average")

    # Step 3. The same entries, reordered for the banks.
    order = gather_order(indices, k)
    packed = np.take_along_axis(indices, order, 1)
    gather0 = packed[0, groups[0]]
    assert sorted(packed[0]) == sorted(indices[0])                    # the same entries
    print(f"\nStep 3: gather_order: gather 0 now reads columns {first(gather0)}; per bank {banks_of(gather0, k)}: "
          f"{gather_passes(one_gather(gather0, k), k):.0f} pass(es); the row's gathers "
          f"{gather_passes(packed, k):.2f} on average")
    print("  passes a gather, column order -> gather_order, over random rows:")
    rows = 4 if quick else 32
    table = {}
    for width in WIDTHS:
        for sparsity in SPARSITIES:
            _, cols = random_rows(rows, width, sparsity, rng)
            table[width, sparsity] = (gather_passes(cols, width),
                                      gather_passes(np.take_along_axis(cols, gather_order(cols, width), 1), width))
            print(f"    K = {width:5d}, {100 * sparsity:.0f} %: {table[width, sparsity][0]:.2f} -> "
                  f"{table[width, sparsity][1]:.2f}")
    assert all(after < 0.6 * before for before, after in table.values())
    out["passes"] = table

    # Step 4. The kernel on the reordered rows against the reference on the rows as built.
    on_gpu = os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"
    m, k = (256, 4096) if on_gpu and not quick else (16, 1024)        # toy size on the simulator
    values, indices = random_rows(m, k, 0.8, rng)
    x = rng.standard_normal((1, k)).astype(values.dtype)
    want = reference(values, indices, k, x).astype(np.float32)
    assert np.array_equal(np.asarray(kernels.gather_order(indices, k)), gather_order(indices, k))   # its kernel
    got = np.asarray(kernels.spmm_ell_rows_linear(*bank_balanced(values, indices, k), k, x)).astype(np.float32)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"\nStep 4: the order from gpu.spmm_ell_rows.gather_order (one thread a row) is the reference's; "
          f"spmm_ell_rows_linear on the reordered rows ({m}x{k}, 80 %, bfloat16, "
          f"{'GPU' if on_gpu else 'CUDA simulator'}) against the reference: max difference {err:.1e} of the "
          f"largest output (float32 sums in another order, one rounding to bfloat16)")
    assert err < TOLERANCE
    out["kernel_error"] = err

    # Step 5. The floor: the same grid reading the same rows, without the product.
    folded = np.bitwise_xor.reduce(np.asarray(kernels.read_rows(values, indices, k)), initial=np.uint32(0))
    assert int(folded) == read_rows(values, indices)                 # every word of the rows read once
    print(f"\nStep 5: gpu.spmm_ell_rows.read_rows reads the {m} rows with the product's grid and 16-byte loads and "
          f"does nothing else (its XOR of the words equals the reference's). On the H200 (uspmm_decode.md; "
          f"`python -m experiments.bench_sparse_linear --floor` times it): {FLOOR_H200}")

    # Step 6. Fewer bytes: compact rows, whose sorted chunks bring the bank passes back.
    from sparsekit.reference import spmm_ell_compact as compact

    print("\nStep 6: compact ELL rows (a 16-bit base a chunk of 8, an 8-bit offset a slot): bytes a kept weight, and "
          "passes a gather with each chunk's slots in column order -> slot_order, against the padded rows' "
          "gather_order:")
    table = {}
    for sparsity in SPARSITIES:
        values, indices = random_rows(rows, 4096, sparsity, rng)
        kept = int((indices < 4096).sum())
        ordered = compact.from_ell_rows(values, indices, 4096)
        passes = [compact.gather_passes(*compact.from_ell_rows(values, indices, 4096, balanced=False), 4096),
                  compact.gather_passes(*ordered, 4096),
                  gather_passes(np.take_along_axis(indices, gather_order(indices, 4096), 1), 4096)]
        table[sparsity] = passes
        print(f"    K = 4096, {100 * sparsity:.0f} %: {compact.nbytes(*ordered) / kept:.2f} bytes (padded rows "
              f"{(values.nbytes + indices.nbytes) / kept:.2f}); passes {passes[0]:.2f} -> {passes[1]:.2f} "
              f"(padded rows {passes[2]:.2f})")
    assert all(ordered < before for before, ordered, _ in table.values())
    out["compact_passes"] = table
    print(f"  On the H200 (uspmm_decode.md): {COMPACT_H200}")
    return out


if __name__ == "__main__":
    from sparsekit.backend import choose_backend

    choose_backend()      # the simulator when no GPU answers (before numba.cuda is imported)
    main(quick="--quick" in sys.argv)
