from otter.test_files import test_case

OK_FORMAT = False

name = "q4"
points = None

@test_case(points=1, hidden=False)
def test_exact_rnt_first_step_and_monotone(exact_rnt):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_exact_rnt_first_step_and_monotone(exact_rnt)

@test_case(points=1, hidden=False)
def test_exact_rnt_geometric(exact_rnt):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_exact_rnt_geometric(exact_rnt)

@test_case(points=1, hidden=False)
def test_exact_rnt_trapped_loop(exact_rnt):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_exact_rnt_trapped_loop(exact_rnt)

