"""syncer"""
