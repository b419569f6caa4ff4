"""The experiments of the book (Chapters 6-9), as four *families* that share one interface
(:mod:`.family`: configs, run, load, schema, one suite runner and one ``suite`` command):
``wikitext2`` (Chapter 6, 06_wikitext; Choi, Cho, Lee (2023) Sec. 4.1, App. D, F, G; :mod:`.runs`),
``gpt2`` (Chapter 7, 07_gpt2; Sec. 4.2 and Welleck et al. (2020) Sec. 5.3; :mod:`.gpt2`),
``sparse`` (Chapter 8, 08_sparse; Martins et al. (2020) Sec. 5.1; :mod:`.sparse`) and
``temperature`` (Chapter 9, 09_temperature; Contextual Temperature (2020) Sec. 4;
:mod:`.temperature_suite`, its analyses in :mod:`.temperature_analysis`). Beside them: configs and profiles (:mod:`.config`; their typed sections in
:mod:`.config_sections`, decoder names in :mod:`.decoder_names`), the one training
loop (:mod:`.trainer`) with its checkpoints (:mod:`.checkpoints`) and data parallelism
(:mod:`.distributed`), the data a run trains on (:mod:`.preparation`), the model and
optimiser a config names (:mod:`.model_setup`), the scores of a split (:mod:`.evaluation`), the results store (:mod:`.results`), and what a reader can do with the
results: where they come from, retraining, a time estimate (:mod:`.choices`), and which of
them a chapter page shows (:mod:`.page_selection`).

The package attribute ``train`` is the function :func:`.trainer.train`; the module is
``nmst_lib.experiments.trainer``. ``nmst_lib.experiments.temperature`` (the name Chapter 9
imports) is the module :mod:`.temperature_suite`, not the output layer
:mod:`nmst_lib.temperature`."""

# isort: off
# In this order: importing .runs, .gpt2, .sparse and .temperature_suite registers the families
# in the book's order (family_names: wikitext2, gpt2, sparse, temperature).
from .config import (
    ALL_DECODERS,
    CPU_EPS,
    PAPER_EPS,
    PROFILES,
    DecoderSpec,
    ExperimentConfig,
    config_from_dict,
    config_hash,
    default_decoders,
    make_config,
    training_hash,
    parse_decoder,
    validate_config,
)
from .config_sections import (
    FIELD_SECTIONS,
    DataOptions,
    DecodingOptions,
    GPT2Options,
    ModelOptions,
    TemperatureOptions,
    TrainingOptions,
)
from .family import (
    Family,
    family_names,
    get_family,
    register,
    run_family_suite,
    scratch_folder,
    select_configs,
    train_here,
)
from .results import (
    CURRENT,
    MISSING,
    STALE,
    StoredResult,
    default_results_dir,
    load_result,
    published_results_dir,
    result_path,
    save_result,
)
from .runs import (
    decode_at_scale,
    eos_probability_traces,
    evaluate_trained,
    load_or_run,
    load_trained,
    rnt_grid,
    run_experiment,
    run_suite,
    suite_configs,
)
from .choices import TimeEstimate, describe_results, estimate_profile_time, run_choices
from .page_selection import PageResults, model_names, page_results, partial_notice
from .gpt2 import gpt2_suite_configs, load_gpt2_results, run_gpt2_suite
from .sparse import (
    SparseConfig,
    load_or_run_sparse,
    load_sparse_result,
    load_sparse_results,
    run_sparse,
    run_sparse_suite,
    sparse_suite_configs,
)
from . import temperature_suite  # noqa: F401
from . import temperature_suite as temperature  # noqa: F401 (Chapter 9 imports this name)
from .temperature_suite import (
    TemperatureConfig,
    load_temperature_result,
    load_temperature_results,
    run_temperature,
    run_temperature_suite,
    temperature_suite_configs,
)
from .checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from .evaluation import evaluate_perplexity
from .preparation import PreparedData, prepare_data
from .trainer import TrainedRun, checkpoint_path, train
# isort: on

__all__ = [
    "ALL_DECODERS", "CPU_EPS", "PAPER_EPS", "PROFILES", "DecoderSpec", "ExperimentConfig", "config_from_dict",
    "config_hash", "default_decoders", "training_hash", "make_config", "parse_decoder", "validate_config",
    "FIELD_SECTIONS", "DataOptions", "DecodingOptions", "GPT2Options", "ModelOptions", "TemperatureOptions",
    "TrainingOptions",
    "CURRENT", "MISSING", "STALE", "StoredResult", "load_result", "result_path", "save_result",
    "default_results_dir", "published_results_dir",
    "Family", "family_names", "get_family", "register", "run_family_suite", "select_configs", "scratch_folder", "train_here",
    "TimeEstimate", "describe_results", "estimate_profile_time", "run_choices", "PageResults", "page_results", "partial_notice", "model_names",
    "decode_at_scale", "eos_probability_traces", "evaluate_trained", "load_or_run", "load_trained", "rnt_grid",
    "run_experiment", "run_suite", "suite_configs",
    "CheckpointError", "PreparedData", "TrainedRun", "checkpoint_path", "evaluate_perplexity", "load_checkpoint",
    "prepare_data", "save_checkpoint", "train",
    "gpt2_suite_configs", "load_gpt2_results", "run_gpt2_suite",
    "SparseConfig", "load_or_run_sparse", "load_sparse_result", "load_sparse_results", "run_sparse",
    "run_sparse_suite", "sparse_suite_configs",
    "TemperatureConfig", "load_temperature_result", "load_temperature_results", "run_temperature",
    "run_temperature_suite", "temperature_suite_configs",
]
