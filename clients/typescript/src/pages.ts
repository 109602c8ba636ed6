/** Keyset pages: `for await` over every item, following `next_cursor` until it is null. */

export interface Page<T> {
  items: T[];
  next_cursor?: string | null;
}

export async function* paginate<T>(
  fetchPage: (cursor: string | undefined) => Promise<Page<T>>,
): AsyncGenerator<T, void, undefined> {
  let cursor: string | undefined = undefined;
  for (;;) {
    const page: Page<T> = await fetchPage(cursor);
    yield* page.items;
    if (!page.next_cursor) return;
    cursor = page.next_cursor;
  }
}
