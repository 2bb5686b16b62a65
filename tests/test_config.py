import os

import pytest

from deepdensity.config import Config, ConfigError, load, parse_set
from tests.support import ROOT


def test_defaults_are_the_papers():
    c = Config()
    assert (c.base_lr, c.batch_size, c.beta_1, c.beta_2, c.epsilon) == (0.00105, 32, 0.9, 0.999, 1e-8)
    assert (c.n_components, c.conv_filters, c.conv_kernels) == (50, (32, 32, 32), (7, 5, 3))
    assert (c.target_loss, c.max_epochs, c.warmup_epochs) == (0.0016384, 400, 5)


def test_yaml_then_set_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("base_lr: 2.0e-3\nconv_filters: [8, 8, 8]\nmax_epochs: 10\n")
    c = load(str(p), ["max_epochs=20", "target_loss=1e-3", "deterministic=true", "conv_kernels=3,3,3"])
    assert c.base_lr == 0.002 and c.conv_filters == (8, 8, 8)
    assert c.max_epochs == 20 and c.target_loss == 0.001 and c.deterministic is True
    assert c.conv_kernels == (3, 3, 3)


@pytest.mark.parametrize(
    "items, match",
    [
        (["base_rl=0.1"], "unknown config key 'base_rl' \\(did you mean base_lr\\?\\)"),
        (["batch_size=3.5"], "batch_size expects an integer"),
        (["batch_size=many"], "batch_size expects an integer"),
        (["base_lr=fast"], "base_lr expects a number"),
        (["deterministic=maybe"], "expects true or false"),
        (["conv_filters=[a]"], "conv_filters expects an integer"),
        (["max_epochs"], "key=value"),
        (["max_epochs=0"], "max_epochs must be >= 1"),
        (["intensity_scaling=log"], "intensity_scaling must be"),
        (["sigma_min=0"], "sigma_min must be in"),
        (["xla=always"], "xla must be one of"),
        (["max_pass_batch=-1"], "max_pass_batch must be >= 0"),
        (["allreduce_groups=-1"], "allreduce_groups must be >= 0"),
        (["horovod_cycle_ms=-1"], "horovod_cycle_ms must be >= 0"),
        (["base_lr=.inf"], "base_lr must be a finite number > 0"),
        (["base_lr=.nan"], "base_lr must be a finite number > 0"),
        (["beta_1=1"], "beta_1 must be in \\[0, 1\\)"),
        (["beta_2=-0.1"], "beta_2 must be in"),
        (["epsilon=0"], "epsilon must be a finite number"),
        (["seed=-1"], "seed must be in"),
        (["target_loss=.inf"], "target_loss must be a finite number"),
        (["corr_max=.nan"], "corr_max must be in"),
    ],
)
def test_bad_settings_are_clear_errors(items, match):
    with pytest.raises(ConfigError, match=match):
        load(None, items)


def test_bad_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 1\nbase_lr: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML at line 3, column 1: "):  # where the list was cut off
        load(str(bad))
    twice = tmp_path / "twice.yaml"
    twice.write_text("base_lr: 0.001\nseed: 1\nbase_lr: 0.002\n")
    with pytest.raises(
        ConfigError, match=r"twice.yaml, line 3, column 1: key 'base_lr' is given twice \(first on line 1\)"
    ):
        load(str(twice))
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load(str(lst))
    unk = tmp_path / "unk.yaml"
    unk.write_text("workers: 8\n")
    with pytest.raises(ConfigError, match="unknown config key 'workers'"):
        load(str(unk))


@pytest.mark.parametrize(
    "content, match",
    [
        (
            "# réglages\nbase_lr: 0.002\n".encode("latin-1"),
            "not UTF-8 text \\(byte 0xe9 at offset 3, perhaps Latin-1\\)",
        ),
        (b"\x89HDF\r\n\x1a\n\x00\x00rest", "is an HDF5 file, not text"),
        ("base_lr: 0.002\n".encode("utf-16"), "is UTF-16 text"),
        (b"1: 2\n", "key 1 is not a setting name"),
        (b"[1, 2]: 3\n", "not valid YAML|is not a setting name"),
    ],
)
def test_config_files_that_are_not_utf8_yaml_mappings(tmp_path, content, match):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=match):
        load(str(path))


def test_a_yaml_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfbase_lr: 0.002\n")
    assert load(str(path)).base_lr == 0.002
    with pytest.raises(ConfigError, match="is a folder"):
        load(str(tmp_path))


def test_parse_set_reads_yaml_scalars():
    assert parse_set(["a=1", "b=1.5", "c=true", "d=hello", "e=[1, 2]"]) == {
        "a": 1,
        "b": 1.5,
        "c": True,
        "d": "hello",
        "e": [1, 2],
    }


@pytest.mark.parametrize("raw", ["data/a\nb.h5", "data/a #1.h5", " data/lead.h5", "data/trail.h5 ", "tab\there.h5"])
def test_set_keeps_text_as_given(raw):
    # YAML would fold the newline into a space, read ' #1.h5' as a comment and strip the spaces:
    # the run would then look for another file than the one named, and say it is missing
    assert parse_set([f"data_path={raw}"]) == {"data_path": raw}
    assert load(None, [f"data_path={raw}"]).data_path == raw


def test_set_still_reads_a_quoted_text_as_yaml_does():
    assert parse_set(['a="2024"', "b='x y'", 'c="tab\\there"']) == {"a": "2024", "b": "x y", "c": "tab\there"}


def test_shipped_configs_load():
    for p in sorted((ROOT / "configs").glob("*.yaml")):
        load(str(p))


def test_the_package_turns_onednn_on_unless_the_user_said_otherwise():
    import subprocess
    import sys

    code = "import os, deepdensity; print(os.environ['TF_ENABLE_ONEDNN_OPTS'])"
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    for given, expected in ((None, "1"), ("0", "0")):
        run_env = env if given is None else {**env, "TF_ENABLE_ONEDNN_OPTS": given}
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=run_env, capture_output=True, text=True)
        assert out.stdout.strip() == expected, out.stderr


def test_on_off_yes_and_no_reach_a_text_setting_as_written_and_a_switch_as_true_or_false():
    """YAML 1.1 reads off, on, yes and no as booleans, and `--set xla=off` (docs/performance.md's
    own words) was refused as 'xla expects a string, got False'. On the command line the word is
    kept; in a file, where the word is already lost, the error says to quote it."""
    assert parse_set(["xla=off", "b=ON", "c=yes", "d=true"]) == {"xla": "off", "b": "ON", "c": "yes", "d": True}
    assert load(str(ROOT / "configs" / "smoke.yaml"), ["xla=off"]).xla == "off"
    for word, expected in (("on", True), ("off", False), ("yes", True), ("no", False), ("true", True)):
        assert (
            load(str(ROOT / "configs" / "smoke.yaml"), [f"validate_every_pass={word}"]).validate_every_pass is expected
        ), word


def test_a_text_setting_yaml_read_as_a_boolean_says_to_quote_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("xla: off\n")
    with pytest.raises(
        ConfigError,
        match=r"xla expects a string, got False \(YAML reads true, false, on, off.*quote the word, as in xla: 'off'\)",
    ):
        load(str(path))
    path.write_text("xla: 'off'\n")
    assert load(str(path)).xla == "off"
