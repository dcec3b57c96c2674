package urbpipe.delta;

import java.util.ArrayDeque;
import java.util.Iterator;
import java.util.NoSuchElementException;
import org.apache.hadoop.fs.FileStatus;

/**
 * A listing read as it is consumed: Delta's log clean-up lists from version 0 and stops at the
 * first file it keeps, so a store fetches the next files only when the ones fetched are used.
 */
abstract class LazyListing implements Iterator<FileStatus> {
  /** Fetched and not yet returned, in order. */
  protected final ArrayDeque<FileStatus> ready = new ArrayDeque<>();
  /** Nothing more to fetch. */
  protected boolean done;

  /** Add the next files to {@link #ready}, or set {@link #done}. */
  protected abstract void fetch();

  @Override
  public boolean hasNext() {
    while (ready.isEmpty() && !done) {
      fetch();
    }
    return !ready.isEmpty();
  }

  @Override
  public FileStatus next() {
    if (!hasNext()) {
      throw new NoSuchElementException();
    }
    return ready.removeFirst();
  }
}
