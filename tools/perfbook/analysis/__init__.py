"""perfbook.analysis"""
