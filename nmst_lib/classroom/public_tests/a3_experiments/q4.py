from otter.test_files import test_case

OK_FORMAT = False

name = "q4"
points = 4

@test_case(points=1, hidden=False)
def test_experiment_numbers_recomputed(models, results, valid, exp_contexts, L_EXP):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_experiment_numbers_recomputed(models, results, valid, exp_contexts, L_EXP)

@test_case(points=1, hidden=False)
def test_experiment_guarantee_and_training(models, results, EPS_EXP, L_EXP):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_experiment_guarantee_and_training(models, results, EPS_EXP, L_EXP)

