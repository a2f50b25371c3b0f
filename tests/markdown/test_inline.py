"""Inline markup rendered as a reader sees it: what is embedded and what a breadcrumb shows."""

import pytest

from jobs.markdown.inline import render_inline
from jobs.markdown.parse import clean_heading


@pytest.mark.parametrize("source, seen", [
    (r"Use `Get-Item` \(see [the docs](https://learn.microsoft.com/x)\) with \-Path", "Use Get-Item (see the docs) with -Path"),
    ("Set **both** the *first* and __second__ &amp; more", "Set both the first and second & more"),
    ("Read [the guide][guide] and [the FAQ][]", "Read the guide and the FAQ"),
    ('Jump <a name="options"></a>here<br>now', "Jump here now"),
    ("![A diagram of the flow](img/flow.png) shows it", "A diagram of the flow shows it"),
    ("Version 2\\.5 and snake_case_name stay", "Version 2.5 and snake_case_name stay"),
    ("a code span keeps `[x](y) and *z*` as written", "a code span keeps [x](y) and *z* as written"),
])
def test_markup_is_rendered(source, seen):
    assert render_inline(source) == seen


@pytest.mark.parametrize("content, kept", [
    ("Returns a List<T> of <CommonParameters> values", ["List<T>", "<CommonParameters>"]),  # words, no HTML tags
    ("Download it from <https://github.com/PowerShell/PowerShell>", ["https://github.com/PowerShell/PowerShell"]),
    ("See https://gohugo.io/commands for the list", ["https://gohugo.io/commands"]),  # a URL the reader sees
    ("A type literal: [string]$Name, and [int[]]", ["[string]$Name,", "[int[]]"]),  # brackets that are no link
])
def test_what_a_reader_sees_stays(content, kept):
    rendered = render_inline(content)
    assert [word for word in kept if word not in rendered] == []


def test_list_items_keep_their_depth_and_plain_text_is_untouched():
    assert render_inline("- [one](a) **in\n  bold**\n  - [two](b)\n    more") == "- one in\nbold\n  - two\nmore"
    plain = "Nothing to render here, 3 + 4 = 7."
    assert render_inline(plain) is plain


def test_headings_are_rendered_for_breadcrumbs():
    assert clean_heading(r'Configure \`hugo server\` <a id="cfg"></a> {#configure}') == "Configure `hugo server`"
    assert clean_heading("[Get-Item](get-item.md) \\-Path") == "Get-Item -Path"
    assert clean_heading("The **`--clock`** flag") == "The --clock flag"
