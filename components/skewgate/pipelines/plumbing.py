"""Pipeline plumbing: the one op that is not a step, shared by both pipelines."""

from kfp import dsl

from skewgate.common.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def blocked(verdict: dsl.Input[dsl.Artifact]) -> None:
    """Fails the run when its gate refused (promotion refused, drift found), so that the run's state and alerting
    show the block; the pipelines show it as `gate-blocked` / `drift-blocked`.

    Args:
        verdict: The refusing verdict (JSON): promote's refusal, or the nightly drift verdict.
    """
    from skewgate.common.verdict import Verdict

    refused = Verdict.read(verdict.path)
    what = {"promote": "promotion refused", "nightly-drift": "drift detected"}.get(refused.step,
                                                                                  f"{refused.step} blocked")
    raise RuntimeError(f"{what}: {refused.message}")
