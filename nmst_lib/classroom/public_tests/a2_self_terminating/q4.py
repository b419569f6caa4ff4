from otter.test_files import test_case

OK_FORMAT = False

name = "q4"
points = 5

@test_case(points=1, hidden=False)
def test_half_life_step(half_life_step):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_half_life_step(half_life_step)

@test_case(points=1, hidden=False)
def test_tail_bound_shape(tail_bound, half_life_step):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_tail_bound_shape(tail_bound, half_life_step)

