"""nmst_lib.plots is a package of one module per figure family; these tests
keep its ``__all__`` complete (the API page, book/api.md, follows it) and the
names the chapters import from ``nmst_lib.plots`` where they were."""

import importlib
import inspect
import pkgutil

from nmst_lib import plots, theory

MODULES = [
    importlib.import_module(f"nmst_lib.plots.{info.name}")
    for info in pkgutil.iter_modules(plots.__path__)
]


def public_definitions(module):
    """Functions and classes defined in ``module`` (not imported into it)
    whose names do not start with an underscore."""
    return {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module.__name__
    }


def test_each_module_lists_its_public_definitions_in_all():
    assert {m.__name__.rsplit(".", 1)[1] for m in MODULES} == {
        "style",
        "explorers",
        "eos_curves",
        "termination",
        "token_traces",
        "sparse_support",
        "temperature_curves",
    }
    for module in MODULES:
        assert public_definitions(module) <= set(module.__all__), module
        assert all(hasattr(module, name) for name in module.__all__), module


def test_the_package_all_is_every_modules_all_once():
    names = [name for m in MODULES for name in m.__all__]
    assert sorted(plots.__all__) == sorted(names)
    assert len(set(plots.__all__)) == len(plots.__all__)
    for module in MODULES:
        for name in module.__all__:
            assert getattr(plots, name) is getattr(module, name)


def test_every_explorer_has_both_front_ends():
    html = {n[: -len("_html")] for n in plots.__all__ if n.endswith("_html")}
    live = {
        n[: -len("_widget")] for n in plots.__all__ if n.endswith("_widget")
    }
    assert html == live and len(html) == 6  # five explorers and the generic


def test_the_eos_trajectories_live_in_theory_and_stay_importable_here():
    from nmst_lib.plots import (
        EOS_SHAPES,
        _is_sentence_end,
        _token_labels,
        eos_probabilities,
        eos_trajectory,
    )

    assert eos_trajectory is theory.eos_trajectory
    assert eos_probabilities is theory.eos_probabilities
    assert EOS_SHAPES is theory.EOS_SHAPES
    assert {"eos_trajectory", "eos_probabilities"} <= set(theory.__all__)
    assert callable(_is_sentence_end) and callable(_token_labels)
