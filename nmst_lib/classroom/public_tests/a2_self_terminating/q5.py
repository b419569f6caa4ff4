from otter.test_files import test_case

OK_FORMAT = False

name = "q5"
points = 6

@test_case(points=1, hidden=False)
def test_rnt_token_level(my_rnt):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_rnt_token_level(my_rnt)

@test_case(points=1, hidden=False)
def test_rnt_beam_uses_first_finish(my_rnt):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_rnt_beam_uses_first_finish(my_rnt)

@test_case(points=1, hidden=False)
def test_results_obey_the_theorems(results, EPS_VALUES, BEAM, LS):
    from nmst_lib.classroom import a2_self_terminating as checks
    checks.check_results_obey_the_theorems(results, EPS_VALUES, BEAM, LS)

