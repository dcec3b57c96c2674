package urbpipe.delta;

import io.delta.storage.LocalLogStore;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Iterator;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for a lake on the local file system whose listing costs the same on day
 * 365 as on day 1 (decision 0017).
 *
 * <p>Delta finds a table's new versions with {@code listFrom(_delta_log/<version>.)}: every
 * file of the log whose name sorts at or after that prefix. Hadoop's local listing reads the
 * whole folder to answer it, and a bulk table's log holds every commit of
 * {@code delta.logRetentionDuration} (four files per commit: about 20 ms per commit for
 * every 1,000 files, benchmarks/delta_log_growth.py). The names of a log are known in
 * advance, though: {@code %020d.json} for each commit, {@code .crc} beside it, and
 * {@code .checkpoint.parquet} at a checkpoint; its commits are contiguous from the oldest
 * kept to the newest (Delta's clean-up deletes from the oldest end). So this store answers by
 * probing those names, version after version, from the start until the first missing commit,
 * lazily: Delta's log clean-up, which lists from version 0 and stops at the first file it
 * keeps, reads only what it deletes. A start below the oldest kept commit is found by a
 * binary search up to the version {@code _last_checkpoint} names.
 *
 * <p>Writes and reads are Delta's {@link LocalLogStore}'s. Anything this store does not know
 * the names of is listed the Hadoop way: a start that is not a version, any start of a table
 * whose {@code _last_checkpoint} names a multi-part or V2 checkpoint (their file names cannot
 * be guessed), and a start past the newest commit of a table without a checkpoint.
 */
public class ProbingLocalLogStore extends LocalLogStore {

  private static final Pattern VERSIONED = Pattern.compile("(\\d{20})\\..*");
  private static final Pattern TOP_VERSION = Pattern.compile("^\\{\"version\":(\\d+)[,}]");
  /** {@link #lastCheckpoint}: the table has none yet. */
  static final long NO_CHECKPOINT = -1;
  /** What a version may have, in the order a listing sorts them. */
  private static final String[] SUFFIXES = {".checkpoint.parquet", ".crc", ".json"};

  public ProbingLocalLogStore(Configuration conf) {
    super(conf);
  }

  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration conf) throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    Matcher versioned = VERSIONED.matcher(path.getName());
    if (!"file".equals(fs.getScheme()) || !versioned.matches()) {
      return super.listFrom(path, conf);
    }
    Path parent = fs.makeQualified(path).getParent();
    java.nio.file.Path dir = Paths.get(parent.toUri().getPath());
    if (!Files.isDirectory(dir)) {
      throw new FileNotFoundException("No such file or directory: " + parent);
    }
    Long first = firstVersion(dir, Long.parseLong(versioned.group(1)));
    if (first == null) {
      return super.listFrom(path, conf);
    }
    return new Probe(dir, parent, path.getName(), first);
  }

  /** The version to probe from for a start at {@code start}; null: list the Hadoop way. */
  static Long firstVersion(java.nio.file.Path dir, long start) throws IOException {
    Long last = lastCheckpoint(dir);
    if (last == null) {
      return null; // a checkpoint whose file names cannot be guessed
    }
    if (Files.exists(dir.resolve(name(start, ".json")))) {
      return start;
    }
    if (last == NO_CHECKPOINT || !Files.exists(dir.resolve(name(last, ".json")))) {
      return null;
    }
    if (start > last) {
      return start; // past the newest commit: nothing (the probe finds what came since)
    }
    long absent = start; // below the oldest kept commit: find it, in (start, last]
    long present = last;
    while (present - absent > 1) {
      long mid = absent + (present - absent) / 2;
      if (Files.exists(dir.resolve(name(mid, ".json")))) {
        present = mid;
      } else {
        absent = mid;
      }
    }
    return present;
  }

  /**
   * The version {@code _last_checkpoint} names when it is a classic single-file one; {@link
   * #NO_CHECKPOINT} without one; null when it names a multi-part or V2 checkpoint, or cannot
   * be read.
   */
  static Long lastCheckpoint(java.nio.file.Path dir) throws IOException {
    String text;
    try {
      text = Files.readString(dir.resolve("_last_checkpoint"), StandardCharsets.UTF_8);
    } catch (NoSuchFileException e) {
      return NO_CHECKPOINT;
    }
    Matcher version = TOP_VERSION.matcher(text.strip());
    if (!version.find() || text.contains("\"parts\"") || text.contains("\"v2Checkpoint\"")) {
      return null;
    }
    return Long.parseLong(version.group(1));
  }

  static String name(long version, String suffix) {
    return String.format("%020d%s", version, suffix);
  }

  /** The log's files from a version on, probed one version at a time as they are asked for. */
  private static final class Probe extends LazyListing {
    private final java.nio.file.Path dir;
    private final Path parent;
    private final String from;
    private long version;

    Probe(java.nio.file.Path dir, Path parent, String from, long version) {
      this.dir = dir;
      this.parent = parent;
      this.from = from;
      this.version = version;
    }

    @Override
    protected void fetch() {
      if (stat(name(version, ".json")) == null) {
        done = true;
        return;
      }
      for (String suffix : SUFFIXES) {
        String file = name(version, suffix);
        FileStatus status = file.compareTo(from) >= 0 ? stat(file) : null;
        if (status != null) {
          ready.addLast(status);
        }
      }
      version++;
    }

    private FileStatus stat(String file) {
      try {
        BasicFileAttributes attrs =
            Files.readAttributes(dir.resolve(file), BasicFileAttributes.class);
        return new FileStatus(attrs.size(), false, 1, 32L << 20,
            attrs.lastModifiedTime().toMillis(), new Path(parent, file));
      } catch (NoSuchFileException e) {
        return null;
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    }
  }
}
