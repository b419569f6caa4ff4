from otter.test_files import test_case

OK_FORMAT = False

name = "q8"
points = None

@test_case(points=1, hidden=False)
def test_mismatch_format(table5):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_mismatch_format(table5)

@test_case(points=1, hidden=False)
def test_mismatch_supports(table5):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_mismatch_supports(table5)

@test_case(points=1, hidden=False)
def test_mismatch_table5(table5):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_mismatch_table5(table5)

