"""learners"""
