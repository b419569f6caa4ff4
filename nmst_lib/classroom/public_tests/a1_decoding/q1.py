from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = None

@test_case(points=1, hidden=False)
def test_nucleus_keeps_the_top_token(nucleus_candidates):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_nucleus_keeps_the_top_token(nucleus_candidates)

@test_case(points=1, hidden=False)
def test_nucleus_is_a_most_probable_set(nucleus_candidates):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_nucleus_is_a_most_probable_set(nucleus_candidates)

@test_case(points=1, hidden=False)
def test_nucleus_mass_reaches_mu(nucleus_candidates):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_nucleus_mass_reaches_mu(nucleus_candidates)

@test_case(points=1, hidden=False)
def test_nucleus_is_the_smallest_set(nucleus_candidates):
    from nmst_lib.classroom import a1_decoding as checks
    checks.check_nucleus_is_the_smallest_set(nucleus_candidates)

