from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 7

@test_case(points=1, hidden=False)
def test_uniform_model_gives_vocabulary_size(sequence_perplexity):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_uniform_model_gives_vocabulary_size(sequence_perplexity)

@test_case(points=1, hidden=False)
def test_perplexity_pools_tokens(sequence_perplexity):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_perplexity_pools_tokens(sequence_perplexity)

@test_case(points=1, hidden=False)
def test_perplexity_counts_eos(sequence_perplexity):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_perplexity_counts_eos(sequence_perplexity)

