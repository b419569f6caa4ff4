from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 7

@test_case(points=1, hidden=False)
def test_gpt2_rows_are_distributions(gpt2_nmst_log_probs):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_gpt2_rows_are_distributions(gpt2_nmst_log_probs)

@test_case(points=1, hidden=False)
def test_gpt2_eos_floor(gpt2_nmst_log_probs):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_gpt2_eos_floor(gpt2_nmst_log_probs)

@test_case(points=1, hidden=False)
def test_gpt2_matches_cached_decoding(gpt2_nmst_log_probs):
    from nmst_lib.classroom import a3_experiments as checks
    checks.check_gpt2_matches_cached_decoding(gpt2_nmst_log_probs)

