from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = None

@test_case(points=1, hidden=False)
def test_eps_perplexity_without_smoothing(epsilon_perplexity):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_eps_perplexity_without_smoothing(epsilon_perplexity)

@test_case(points=1, hidden=False)
def test_eps_perplexity_uniform_and_zeros(epsilon_perplexity):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_eps_perplexity_uniform_and_zeros(epsilon_perplexity)

@test_case(points=1, hidden=False)
def test_sparsemax_score_bounds(sparsemax_score):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sparsemax_score_bounds(sparsemax_score)

@test_case(points=1, hidden=False)
def test_sparsemax_score_whole_distribution(sparsemax_score):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sparsemax_score_whole_distribution(sparsemax_score)

