"""A lean YAML composer: libyaml's parser events into ruamel's node graph, without ruamel's composer overhead.

ruamel's own :class:`~ruamel.yaml.composer.Composer` reaches the parser and the resolver through
properties on every event and resolves each plain scalar through the versioned resolver's property
chain: on a 2 KB plan that was ~20 µs per event, four times libyaml's parse itself, and the largest
cost of reading a spec, cluster or plan. :func:`compose_events` builds the same nodes (same classes,
tags, values, marks, styles, anchors and aliases) from the same events with direct calls.

Only for a parser that has already been fed the text (libyaml's ``CParser``) and for a document
without a ``%YAML`` directive (the default YAML version's implicit resolvers). Errors are raised
as ruamel's (:class:`~ruamel.yaml.composer.ComposerError`); :func:`planmap.spec.yamlpos.compose_yaml`
re-reads a failing text with ruamel's pure parser and composer for its messages, so this fast path
decides only what a valid document composes to. A document nested deeper than :data:`MAX_NESTING`
levels raises ``RecursionError`` here, so that the pure composer decides it as before (it ends in
``RecursionError`` itself somewhere past 300 levels; libyaml's C composer would crash the process).
"""

from __future__ import annotations

import warnings
from typing import Any

from ruamel.yaml.composer import ComposerError, ReusedAnchorWarning
from ruamel.yaml.events import (
    AliasEvent,
    MappingEndEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.tag import Tag

__all__ = ["compose_events", "MAX_NESTING"]

MAX_NESTING = 100  # deeper documents are left to ruamel's composer (specs and plans nest < 10 levels)


class _Composer:
    """One document's composition: the anchors seen so far and the implicit-tag table of its YAML version."""

    def __init__(self, parser: Any, resolver: Any):
        self.get = parser.get_event
        self.anchors: dict[str, Node] = {}
        self.implicit = resolver.versioned_resolver  # first character -> [(tag, regexp)], as ruamel resolves
        self.resolved: dict[str, str | None] = {}  # plain scalar text -> its implicit tag (None: a string)
        self.default_scalar = resolver.DEFAULT_SCALAR_TAG
        self.default_sequence = resolver.DEFAULT_SEQUENCE_TAG
        self.default_mapping = resolver.DEFAULT_MAPPING_TAG

    def scalar_tag(self, value: str, implicit: tuple[bool, bool]) -> Any:
        """The tag ruamel's ``VersionedResolver.resolve`` gives an untagged scalar."""
        if implicit[0]:
            if value not in self.resolved:
                table = self.implicit
                found = None
                for tag, regexp in table.get(value[0] if value else "", []) + table.get(None, []):
                    if regexp.match(value):
                        found = tag
                        break
                self.resolved[value] = found
            found = self.resolved[value]
            if found is not None:
                return Tag(suffix=found)
        return self.default_scalar

    def node(self, event: Any, depth: int = 0) -> Node:
        kind = type(event)
        if kind is AliasEvent:
            if event.anchor not in self.anchors:
                raise ComposerError(None, None, f"found undefined alias {event.anchor!r}", event.start_mark)
            return self.anchors[event.anchor]
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            warnings.warn(f"\nfound duplicate anchor {anchor!r}\nfirst occurrence {self.anchors[anchor].start_mark}\n"
                          f"second occurrence {event.start_mark}", ReusedAnchorWarning, stacklevel=2)
        tag = event.ctag
        untagged = tag is None or str(tag) == "!"
        node: Node
        if kind is ScalarEvent:
            if untagged:
                tag = self.scalar_tag(event.value, event.implicit)
            node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style, anchor=anchor)
            if anchor is not None:
                self.anchors[anchor] = node
            return node
        get = self.get
        if depth >= MAX_NESTING:
            raise RecursionError(f"the document nests deeper than {MAX_NESTING} levels")
        depth += 1
        if kind is SequenceStartEvent:
            node = SequenceNode(self.default_sequence if untagged else tag, [], event.start_mark, None,
                                flow_style=event.flow_style, anchor=anchor)
            if anchor is not None:
                self.anchors[anchor] = node
            items = node.value
            item = get()
            while type(item) is not SequenceEndEvent:
                items.append(self.node(item, depth))
                item = get()
        else:  # a MappingStartEvent: the parser emits no other event here
            node = MappingNode(self.default_mapping if untagged else tag, [], event.start_mark, None,
                               flow_style=event.flow_style, anchor=anchor)
            if anchor is not None:
                self.anchors[anchor] = node
            pairs = node.value
            item = get()
            while type(item) is not MappingEndEvent:
                key = self.node(item, depth)
                pairs.append((key, self.node(get(), depth)))
                item = get()
        node.end_mark = item.end_mark
        return node


def compose_events(parser: Any, resolver: Any) -> Node | None:
    """The root node of the single document the ``parser``'s events describe (None for an empty stream),
    as ruamel's ``Composer.get_single_node`` composes it."""
    get = parser.get_event
    get()  # STREAM-START
    event = get()
    if type(event) is StreamEndEvent:
        return None
    composer = _Composer(parser, resolver)  # event is DOCUMENT-START
    root = composer.node(get())
    get()  # DOCUMENT-END
    event = get()
    if type(event) is not StreamEndEvent:
        raise ComposerError("expected a single document in the stream", root.start_mark,
                            "but found another document", event.start_mark)
    return root
