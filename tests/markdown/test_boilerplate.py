from jobs.markdown.boilerplate import is_link_only, link_texts, see_also_line


def test_link_only_lines():
    assert is_link_only("- [Configure server](/configuration/server/)")
    assert is_link_only("[A](a) | [B](b)")
    assert is_link_only("* <https://gohugo.io>")
    assert not is_link_only("See [the server docs](/server) for the redirect settings.")
    assert not is_link_only("- plain item")


def test_see_also_line_lists_unique_labels():
    assert link_texts("[A](x) and [B][ref]") == ["A", "B"]
    assert see_also_line(["- [A](x)", "- [B](y)", "- [A](z)"]) == "See also: A, B."
    assert see_also_line(["no links"]) == ""
