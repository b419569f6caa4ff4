from otter.test_files import test_case

OK_FORMAT = False

name = "q5"
points = None

@test_case(points=1, hidden=False)
def test_sweep_format(results):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sweep_format(results)

@test_case(points=1, hidden=False)
def test_sweep_theorem_8_6(results):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sweep_theorem_8_6(results)

@test_case(points=1, hidden=False)
def test_sweep_monotone(results):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sweep_monotone(results)

