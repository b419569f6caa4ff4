from otter.test_files import test_case

OK_FORMAT = False

name = "q5"
points = None

@test_case(points=1, hidden=False)
def test_rnt_from_tokens_small_example(rnt_from_tokens):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_rnt_from_tokens_small_example(rnt_from_tokens)

@test_case(points=1, hidden=False)
def test_experiment_follows_the_theory(generations, curves, rnn, LS):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_experiment_follows_the_theory(generations, curves, rnn, LS)

