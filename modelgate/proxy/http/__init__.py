"""HTTP plumbing of the server side: connection guards, bad requests, client addresses, listening sockets,
body decoding and multipart streaming.
"""
