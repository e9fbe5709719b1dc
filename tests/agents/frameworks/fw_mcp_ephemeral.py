"""mcp: an MCPServer with its default request-state security (a random AES-GCM key of
this process, never readable again) held in a global at a snapshot: refused by name with
the fix, and the job carries on."""

from mcp.server.mcpserver import MCPServer

from snapstate import SnapshotError, snapshot

server = MCPServer("inventory", log_level="WARNING")


@server.tool()
def count_items(shelf: str) -> str:
    """How many items a shelf holds."""
    return f"shelf {shelf} holds {len(shelf)} items"


def main():
    try:
        snapshot("with-server")
    except SnapshotError as exc:
        print("REFUSED", exc)
    print("carried on")
