"""for and while loops with snapshot() at iteration k; break, continue and else."""

from snapstate import snapshot


def main():
    out = []
    for i in range(6):
        if i == 1:
            continue
        if i == 3:
            snapshot("for-3")
        if i == 5:
            break
        out.append(i)
    else:
        out.append("never")
    print("for", out, flush=True)

    n, seen = 0, []
    while n < 8:
        n += 1
        if n % 2:
            continue
        if n == 4:
            snapshot("while-4")
        seen.append(n)
    else:
        seen.append("else")
    print("while", seen, flush=True)

    pairs = []
    for a in "xy":
        for b in range(2):
            snapshot(f"nested-{a}{b}")
            pairs.append(f"{a}{b}")
    print("pairs", pairs, flush=True)
    return len(out) + len(seen) + len(pairs)
