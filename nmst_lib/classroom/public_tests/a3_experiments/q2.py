from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 7

@test_case(points=1, hidden=False)
def test_rnt_hand_example(rnt_curve_from_tokens):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_rnt_hand_example(rnt_curve_from_tokens)

@test_case(points=1, hidden=False)
def test_rnt_is_non_increasing(rnt_curve_from_tokens):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_rnt_is_non_increasing(rnt_curve_from_tokens)

@test_case(points=1, hidden=False)
def test_rnt_at_max_len(rnt_curve_from_tokens):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_rnt_at_max_len(rnt_curve_from_tokens)

