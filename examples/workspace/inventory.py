STOCK: dict[str, int] = {}


def adjust(item: str, delta: int) -> int:
    # TODO: refuse a delta that would take the level below zero
    STOCK[item] = STOCK.get(item, 0) + delta
    return STOCK[item]
