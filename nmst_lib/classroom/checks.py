"""Shared machinery of the assignments' checks: call a student's function, compare with the book.

Every check in ``nmst_lib.classroom.a*`` is a plain function that raises ``AssertionError`` with a
message in the book's terms (what was computed, what the theory requires, and the box that says
so, e.g. "p(eos) at t = 3 is 0.12, below the floor 1 - (1 - eps)^3 = 0.14: Definition 5.1"). The
assignments' test cells (otter-grader) only call these checks, so a test's failure message is the
check's message, and the checks themselves are unit-tested against deliberately wrong code
(``tests/test_classroom_*.py``). A student's code is compared with ``nmst_lib``'s implementation of
the same equation on the inputs given here, never by reading its source.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

__all__ = ["NotImplementedYet", "call_student", "fmt", "expect", "expect_close", "expect_tensor_close",
           "expect_given", "generator"]


class NotImplementedYet(AssertionError):
    """The student's function still returns the stub's value (``None`` or ``...``)."""


def fmt(x: Any, digits: int = 4) -> str:
    """A number or a small tensor written for a failure message (4 significant digits)."""
    if isinstance(x, torch.Tensor):
        if x.numel() == 1:
            return fmt(x.item(), digits)
        if x.numel() <= 8:
            return "[" + ", ".join(fmt(v, digits) for v in x.flatten().tolist()) + "]"
        return f"a tensor of shape {tuple(x.shape)}"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return str(x)
        return f"{x:.{digits}g}"
    return repr(x)


def call_student(fn: Callable, *args, name: str | None = None, **kwargs):
    """Call a student's ``fn``; a stub (returns ``None`` or ``...``) or an exception in it becomes an
    ``AssertionError`` that says which function, with which inputs, and what happened."""
    label = name or getattr(fn, "__name__", "your function")
    if not callable(fn):
        raise AssertionError(f"`{label}` is {fn!r}, not a function: define it in the cell above the check")
    try:
        out = fn(*args, **kwargs)
    except NotImplementedError as err:
        raise NotImplementedYet(f"`{label}` raised NotImplementedError ({err}): it is not implemented yet") from None
    except Exception as err:  # the student's bug, reported in the check's words
        shapes = ", ".join(f"shape {tuple(a.shape)}" if isinstance(a, torch.Tensor) else type(a).__name__
                           for a in args)
        raise AssertionError(f"`{label}` raised {type(err).__name__}: {err} (called with {shapes})") from None
    if out is None or out is Ellipsis:
        raise NotImplementedYet(f"`{label}` returned {out!r}: it is not implemented yet (replace the `...`)")
    return out


def _pair(got, want) -> tuple[str, str]:
    """``got`` and ``want`` written with as many digits as it takes to see that they differ."""
    for digits in (4, 6, 8, 10, 12, 14, 17):
        a, b = fmt(got, digits), fmt(want, digits)
        if a != b:
            return a, b
    return a, b


def expect(condition: bool, message: str) -> None:
    """``assert condition, message`` that survives ``python -O``."""
    if not bool(condition):
        raise AssertionError(message)


def expect_close(got: float, want: float, what: str, where: str, rtol: float = 1e-6, atol: float = 1e-9,
                 hint: str = "") -> None:
    """``got`` must equal ``want`` to ``rtol``/``atol``; the message names the quantity and the box,
    then ``hint`` (what the wrong value suggests went wrong), after the numbers."""
    got_f, want_f = float(got), float(want)
    ok = math.isclose(got_f, want_f, rel_tol=rtol, abs_tol=atol) or (math.isinf(got_f) and got_f == want_f)
    a, b = _pair(got_f, want_f)
    expect(ok, f"{what} is {a}, but {where} gives {b}" + (f": {hint}" if hint else ""))


def _at(idx: tuple) -> str:
    """Where in a tensor an entry is, as a failure message says it: ``, at index [2, 24, 3],``
    (nothing for a 0-dimensional tensor), so the index is not read as part of the description."""
    return f", at index [{', '.join(map(str, idx))}]," if idx else ""


def expect_tensor_close(got, want: torch.Tensor, what: str, where: str, rtol: float = 1e-5,
                        atol: float = 1e-6) -> None:
    """``got`` (tensor-like) must have ``want``'s shape and values; the message shows the worst entry."""
    if not isinstance(got, torch.Tensor):
        try:
            got = torch.as_tensor(got)
        except Exception:
            raise AssertionError(f"{what} should be a tensor of shape {tuple(want.shape)}, got {type(got).__name__}") from None
    expect(tuple(got.shape) == tuple(want.shape),
           f"{what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    got = got.detach().to(want.dtype)
    finite_match = torch.isfinite(got) == torch.isfinite(want)
    if not bool(finite_match.all()):
        idx = tuple(int(i) for i in (~finite_match).nonzero()[0])
        raise AssertionError(f"{what}{_at(idx)} is {fmt(got[idx])}, but {where} gives {fmt(want[idx])}")
    both = torch.isfinite(want)
    diff = torch.where(both, (got - want).abs() - (atol + rtol * want.abs()), torch.zeros_like(want))
    if bool((diff > 0).any()):
        idx = tuple(int(i) for i in (diff == diff.max()).nonzero()[0])
        a, b = _pair(got[idx].item(), want[idx].item())
        raise AssertionError(f"{what}{_at(idx)} is {a}, but {where} gives {b}")
    same_inf = torch.where(both, torch.ones_like(want, dtype=torch.bool), got == want)
    expect(bool(same_inf.all()), f"{what} has infinities where {where} does not")


def generator(seed: int) -> torch.Generator:
    """A CPU generator: checks draw their random inputs from fixed seeds, so a failure repeats."""
    return torch.Generator().manual_seed(int(seed))


def _same(got, want) -> bool:
    if isinstance(want, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.shape == want.shape and bool(torch.equal(got.cpu(), want))
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(want) and all(map(_same, got, want))
    if isinstance(want, torch.nn.Module):
        if not isinstance(got, torch.nn.Module) or type(got) is not type(want):
            return False
        a, b = got.state_dict(), want.state_dict()
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b) and repr(got) == repr(want)
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and got == want
    if hasattr(want, "__dict__") and not isinstance(want, type):  # a model that is not a Module: its fields
        return type(got) is type(want) and _same(vars(got), vars(want))
    return got == want


def _shown(value, fixed: bool = False) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}" + ("" if value.numel() > 8 else f" {fmt(value)}")
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)} values from {value[0]!r} to {value[-1]!r}"
    if isinstance(value, torch.nn.Module) or (hasattr(value, "__dict__") and not isinstance(value, type)):
        return "the given cell's model" if fixed else f"a model ({type(value).__name__}) with other weights or settings"
    return repr(value)


def expect_given(given: dict[str, Any], fixed: dict[str, Any]) -> None:
    """Each name of the problem's given cell still holds the value the problem fixes.

    The experiment checks read the notebook's constants (its grid of eps, its horizon, its contexts,
    its model); were an edited constant taken at its word, a smaller grid or a shorter horizon would
    be graded as the experiment the problem sets. ``given`` maps a name to the notebook's value,
    ``fixed`` the same names to the problem's (numbers, sequences, tensors, or modules, compared by
    class, settings and weights)."""
    for name, want in fixed.items():
        got = given[name]
        expect(_same(got, want), f"`{name}` is {_shown(got)}, but the problem fixes {_shown(want, True)}: keep the given "
               "cell as it is (restore it from a fresh copy of the notebook); the checks grade the experiment the "
               "problem sets")
