"""Wikipedia: the MediaWiki XML dump reader (wikipedia), the dump parser (wiki_dump) and the
wikitext-to-text conversion (wikimarkup, wiki_blocks, wiki_sections)."""
