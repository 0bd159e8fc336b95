"""Model lint on exported programs: each defect that changes a served model's behaviour is named with its module,
and a clean eval-mode model passes every lint check."""

import pytest
import torch
from torch import nn

from skewgate.export.checks.lint import lint_program


class Block(nn.Module):
    def __init__(self, *, gelu: str = "none") -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)
        self.act = nn.GELU(approximate=gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.drop(self.bn(self.fc(x))))


def _trained(model: Block) -> Block:
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(16, 4))
    return model


def _lint(model: nn.Module):
    program = torch.export.export(model, (torch.randn(8, 4),))
    checks, gelus = lint_program(program)
    return {c.name: c for c in checks}, gelus


def test_a_trained_model_in_eval_mode_passes_every_lint_check():
    torch.manual_seed(0)
    checks, gelus = _lint(_trained(Block()).eval())
    assert all(c.passed for c in checks.values()), {n: c.detail for n, c in checks.items() if not c.passed}
    assert gelus.approximations == {"none": 1}
    assert any(site.startswith("act:") for site in gelus.sites)


@pytest.mark.parametrize(
    ("plant", "check", "named"),
    [
        pytest.param(lambda m: m.train(), "lint.batchnorm_eval_mode", "bn", id="left-in-train-mode"),
        pytest.param(lambda m: (m.eval(), m.drop.train()), "lint.dropout_inactive", "drop", id="dropout-active"),
        pytest.param(lambda m: (m.eval(), m.bn.reset_running_stats()), "lint.batchnorm_stats_trained", "bn",
                     id="bn-stats-never-updated"),
        pytest.param(lambda m: (m.eval(), m.bn.running_var.fill_(-1.0)), "lint.batchnorm_stats_finite", "bn",
                     id="negative-running-var"),
        # one bad channel among good ones (a check that looks at every channel at once would pass these)
        pytest.param(lambda m: (m.eval(), m.bn.running_var.__setitem__(2, -1e-6)), "lint.batchnorm_stats_finite",
                     "bn", id="one-channel-just-below-zero-var"),
        pytest.param(lambda m: (m.eval(), m.bn.running_mean.__setitem__(1, float("inf"))),
                     "lint.batchnorm_stats_finite", "bn", id="one-channel-infinite-mean"),
        pytest.param(lambda m: (m.eval(), m.fc.weight.data.__setitem__((0, 0), float("nan"))),
                     "lint.weights_finite", "fc.weight", id="nan-weight"),
    ],
)
def test_each_planted_defect_fails_its_check_naming_the_module(plant, check, named):
    torch.manual_seed(0)
    model = _trained(Block())
    plant(model)
    checks, _ = _lint(model)
    assert not checks[check].passed and named in checks[check].detail, checks[check].detail
    assert checks[check].value >= 1


def test_tanh_gelu_is_counted_apart_from_erf():
    torch.manual_seed(0)
    _, gelus = _lint(_trained(Block(gelu="tanh")).eval())
    assert gelus.approximations == {"tanh": 1}


@pytest.mark.parametrize("plant", [
    pytest.param(lambda m: m.bn.running_var.__setitem__(2, 0.0), id="one-channel-zero-var"),
    pytest.param(lambda m: (m.bn.running_mean.zero_(), m.bn.running_var.fill_(1.0),
                            m.bn.running_var.__setitem__(3, 1.0 + 1e-6)), id="one-channel-updated"),
])
def test_statistics_just_inside_the_limits_pass(plant):
    """A zero variance is a valid statistic (BatchNorm divides by sqrt(var + eps)), and statistics of which one
    channel moved off the initial values were updated by training."""
    torch.manual_seed(0)
    model = _trained(Block()).eval()
    with torch.no_grad():
        plant(model)
    checks, _ = _lint(model)
    assert checks["lint.batchnorm_stats_finite"].passed and checks["lint.batchnorm_stats_trained"].passed
