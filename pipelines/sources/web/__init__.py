"""Web text: OpenWebText, plain pages, JSONL, HTML and WARC/WET (webtext), HTML main text
(htmltext), WARC record framing (warc_framing) and the URL-list filter (urls)."""
