from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = None

@test_case(points=1, hidden=False)
def test_consistent_top_k_candidate_set(consistent_top_k_log_probs):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_consistent_top_k_candidate_set(consistent_top_k_log_probs)

@test_case(points=1, hidden=False)
def test_consistent_top_k_never_lowers_eos(consistent_top_k_log_probs):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_consistent_top_k_never_lowers_eos(consistent_top_k_log_probs)

@test_case(points=1, hidden=False)
def test_consistent_top_k_keeps_ratios(consistent_top_k_log_probs):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_consistent_top_k_keeps_ratios(consistent_top_k_log_probs)

