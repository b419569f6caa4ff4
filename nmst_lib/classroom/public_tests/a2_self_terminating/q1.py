from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 6

@test_case(points=1, hidden=False)
def test_st_rows_sum_to_one(my_st_log_probs):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_st_rows_sum_to_one(my_st_log_probs)

@test_case(points=1, hidden=False)
def test_st_floor_and_monotone(my_st_log_probs):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_st_floor_and_monotone(my_st_log_probs)

