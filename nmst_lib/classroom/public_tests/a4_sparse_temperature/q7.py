from otter.test_files import test_case

OK_FORMAT = False

name = "q7"
points = None

@test_case(points=1, hidden=False)
def test_softmax_reading_mean(softmax_reading_temperature):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_softmax_reading_mean(softmax_reading_temperature)

@test_case(points=1, hidden=False)
def test_softmax_reading_few_tokens_move(softmax_reading_temperature):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_softmax_reading_few_tokens_move(softmax_reading_temperature)

@test_case(points=1, hidden=False)
def test_reachable_global_temperature(argmax_reachable):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_reachable_global_temperature(argmax_reachable)

@test_case(points=1, hidden=False)
def test_reachable_positive_logits(argmax_reachable):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_reachable_positive_logits(argmax_reachable)

@test_case(points=1, hidden=False)
def test_reachable_shift(argmax_reachable):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_reachable_shift(argmax_reachable)

@test_case(points=1, hidden=False)
def test_reachable_against_search(argmax_reachable):
    from nmst_lib.classroom import a4_sparse_temperature as checks
    checks.check_reachable_against_search(argmax_reachable)

