"""Helpers shared by Assignment 4's checks (:mod:`nmst_lib.classroom.a4_sparse_temperature`
and its q7 and q8 modules): comparisons whose failure messages name what was compared and
where the rule comes from."""

from __future__ import annotations

import torch

from . import checks as C

__all__: list[str] = []


def _close(
    got, want, what: str, where: str, rtol: float = 1e-6, atol: float = 1e-12
) -> None:
    """:func:`~nmst_lib.classroom.checks.expect_close` with this module's default tolerances."""
    C.expect_close(got, want, what, where, rtol=rtol, atol=atol)


_tclose = C.expect_tensor_close


def _callable(fn, name: str) -> None:
    if not callable(fn):
        raise AssertionError(
            f"`{name}` is {fn!r}, not a function: define it in the cell above the check"
        )


def _as_tensor(out, name: str) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise AssertionError(
            f"`{name}` returned a {type(out).__name__}; it should return a torch.Tensor"
        )
    return out.detach()


def _shape_dtype(p: torch.Tensor, z: torch.Tensor, name: str) -> None:
    C.expect(
        tuple(p.shape) == tuple(z.shape),
        f"`{name}` returned shape {tuple(p.shape)} for scores of shape {tuple(z.shape)}: it should work "
        "along the last dimension and keep the shape",
    )
    C.expect(
        p.dtype == z.dtype,
        f"`{name}` returned dtype {p.dtype} for {z.dtype} scores: keep the input's dtype",
    )
