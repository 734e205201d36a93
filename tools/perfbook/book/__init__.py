"""perfbook.book"""
