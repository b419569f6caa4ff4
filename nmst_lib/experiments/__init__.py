"""WikiText-2 experiments of Chapter 6 (06_wikitext): configs and profiles (:mod:`.config`),
training with checkpoints (:mod:`.train`), the results store (:mod:`.results`), end-to-end
runs and suites (:mod:`.runs`), and what a reader can do with the results: where they come
from, retraining, and a time estimate for the paper profile (``nmst_lib.experiments.choices``).
After Choi, Cho, Lee (2023) Sec. 4.1, App. D, F, G. The sparse-text-generation experiments of
Chapter 8 (08_sparse; Martins et al. (2020) Sec. 5.1, Tables 2, 4, 5) live in :mod:`.sparse`; the
GPT-2 experiments of Chapter 7 (07_gpt2; Choi, Cho, Lee (2023) Sec. 4.2, Welleck et al. (2020)
Sec. 5.3) in :mod:`.gpt2`; the contextual-temperature experiments of Chapter 9 (09_temperature;
Contextual Temperature (2020) Sec. 4, Tables 3-4, Fig. 1) in ``nmst_lib.experiments.temperature``."""

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
from .temperature import (
    TemperatureConfig,
    load_temperature_result,
    load_temperature_results,
    run_temperature,
    run_temperature_suite,
    temperature_suite_configs,
)
from .train import (
    CheckpointError,
    PreparedData,
    TrainedRun,
    checkpoint_path,
    evaluate_perplexity,
    load_checkpoint,
    prepare_data,
    save_checkpoint,
    train,
)

__all__ = [
    "ALL_DECODERS", "CPU_EPS", "PAPER_EPS", "PROFILES", "DecoderSpec", "ExperimentConfig", "config_from_dict",
    "config_hash", "default_decoders", "training_hash", "make_config", "parse_decoder", "validate_config",
    "CURRENT", "MISSING", "STALE", "StoredResult", "load_result", "result_path", "save_result",
    "default_results_dir", "published_results_dir",
    "TimeEstimate", "describe_results", "estimate_profile_time", "run_choices",
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
