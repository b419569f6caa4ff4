from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = None

@test_case(points=1, hidden=False)
def test_temperature_range(contextual_temperature):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_temperature_range(contextual_temperature)

@test_case(points=1, hidden=False)
def test_temperature_constant_start(contextual_temperature):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_temperature_constant_start(contextual_temperature)

@test_case(points=1, hidden=False)
def test_ct_log_probs_global(ct_log_probs):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_ct_log_probs_global(ct_log_probs)

@test_case(points=1, hidden=False)
def test_global_temperature_entropy_and_ranking(ct_log_probs):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_global_temperature_entropy_and_ranking(ct_log_probs)

