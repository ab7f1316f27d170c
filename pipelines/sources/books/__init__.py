"""Books: plain-text books, Project Gutenberg boilerplate (books) and front matter
(book_front_matter)."""
