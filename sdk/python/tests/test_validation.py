"""rekon_sdk.validation: the cases of the Rust twin's unit tests
(rules/src/validation.rs), so the two stay one rule."""
from rekon_sdk.validation import FieldError, invalid_message, is_qualified_name, is_valid_label_value, key_path

NAME_REGEX = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"


def test_qualified_names_as_apimachinery_tests_them():
    for good in ["simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
                 "now-with-dashes/now-with-dashes", "now.with.dots/now-with-dashes",
                 "now-with.dashes-and.dots/now_with.dashes-and.dots", "1-num.2-num/3-num", "1234/5678", "1.2.3.4/5678",
                 "Uppercase_Is_OK_123", "example.com/Uppercase_Is_OK_123", "requests.storage-foo", "a" * 63, "a" * 253 + "/b"]:
        assert is_qualified_name(good) == [], good
    for bad in ["nospecialchars%^=@", "cantendwithadash-", "-cantstartwithadash-", "only/one/slash", "Example.com/abc",
                "example_com/abc", "example.com/", "/simple", "a" * 64, "a" * 254 + "/b"]:
        assert is_qualified_name(bad) != [], bad


def test_the_messages_are_the_api_servers():
    assert is_qualified_name("/x") == ["prefix part must be non-empty"]
    assert is_qualified_name("Example.com/x") == [
        "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
    assert is_qualified_name("a/b/c")[0] == (
        "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
    assert is_qualified_name("a" * 64) == ["name part must be no more than 63 characters"]
    assert is_qualified_name("x/") == ["name part must be non-empty", NAME_REGEX]
    assert is_qualified_name("-bad") == [NAME_REGEX]
    assert is_valid_label_value("-x") == [
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]
    for good in ["", "simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63]:
        assert is_valid_label_value(good) == [], good
    for bad in ["nospecialchars%^=@", "Tama-nui-te-rā.is.Māori.sun", "\\backslashes", "-starts-with-dash", "ends-with-dash-", ".starts.with.dot", "ends.with.dot."]:
        assert is_valid_label_value(bad) != [], bad


def test_field_errors_render_as_field_error_does():
    effect = FieldError.not_supported("spec.taints[0].effect", "Sometimes", ["NoSchedule", "PreferNoSchedule", "NoExecute"])
    assert str(effect) == 'spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'
    key = FieldError.invalid(key_path("spec.labels", "a b"), "a b", "bad")
    assert str(key) == 'spec.labels[a b]: Invalid value: "a b": bad'
    assert invalid_message("NodePool", "nodes.lailin.xyz", "gpu", [effect]) == (
        'NodePool.nodes.lailin.xyz "gpu" is invalid: spec.taints[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')
    both = invalid_message("NodePool", "nodes.lailin.xyz", "gpu", [effect, key])
    assert both.startswith('NodePool.nodes.lailin.xyz "gpu" is invalid: [spec.taints[0].effect: ')
    assert both.endswith('Invalid value: "a b": bad]')
    assert FieldError.required("spec.taints[0].effect").body == "Required value"
