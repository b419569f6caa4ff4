from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 8

@test_case(points=1, hidden=False)
def test_nmst_rows_sum_to_one(MyNMSTHead):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_nmst_rows_sum_to_one(MyNMSTHead)

@test_case(points=1, hidden=False)
def test_nmst_floor(MyNMSTHead):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_nmst_floor(MyNMSTHead)

@test_case(points=1, hidden=False)
def test_nmst_can_fall(MyNMSTHead):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_nmst_can_fall(MyNMSTHead)

@test_case(points=1, hidden=False)
def test_nmst_step_matches_forward(MyNMSTHead):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_nmst_step_matches_forward(MyNMSTHead)

