"""perfbook.book.jupyter"""
