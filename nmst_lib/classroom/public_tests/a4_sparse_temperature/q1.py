from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = None

@test_case(points=1, hidden=False)
def test_sparsemax_on_simplex(sparsemax):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sparsemax_on_simplex(sparsemax)

@test_case(points=1, hidden=False)
def test_sparsemax_threshold_form(sparsemax):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sparsemax_threshold_form(sparsemax)

@test_case(points=1, hidden=False)
def test_sparsemax_shift_invariance(sparsemax):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sparsemax_shift_invariance(sparsemax)

@test_case(points=1, hidden=False)
def test_sparsemax_two_tokens(sparsemax):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_sparsemax_two_tokens(sparsemax)

