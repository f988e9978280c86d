"""Starting clusters of squall processes.

``local`` has ``LocalCluster``; ``lifeline`` makes the processes it starts end with
the process that started them.
"""
