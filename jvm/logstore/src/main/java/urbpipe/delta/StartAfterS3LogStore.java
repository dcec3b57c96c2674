package urbpipe.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import io.delta.storage.S3SingleDriverLogStore;
import io.delta.storage.internal.PathLock;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Iterator;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.CommonPrefix;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Response;
import software.amazon.awssdk.services.s3.model.S3Object;

/**
 * Delta's log store for a lake on S3 ({@code s3a://}) whose commits cost the same on day 365
 * as on day 1 (decision 0019).
 *
 * <p>Delta's {@link S3SingleDriverLogStore} answers {@code listFrom(_delta_log/<version>.)}
 * by listing the whole {@code _delta_log} folder, and its {@code write} does the same to see
 * whether the commit file exists: a bulk table keeps 30 days of commits there (two keys per
 * commit), about 1,040 LIST requests of 1,000 keys per listing at the default 5 s trigger.
 * S3's ListObjectsV2 takes a {@code StartAfter} key, though, and returns keys in order from
 * it: this store lists from the version asked for, lazily, page by page, so a commit reads
 * one page whatever the log holds, and Delta's log clean-up (a listing from version 0 that
 * stops at the first file it keeps) reads only the pages it deletes from. A write checks the
 * one key it writes (a HEAD request) instead of listing the folder, and creates the file
 * without S3A's own existence probes ({@code fs.s3a.create.performance}).
 *
 * <p>The guarantees are Delta's single-driver store's: one JVM writes a table, a lock per path
 * in this JVM makes its check-then-write atomic. S3's listings are read-after-write consistent
 * (since December 2020), so the cache of recently written files Delta's store merges into its
 * listings is not needed. A path on any other file system, or a start that is not a version
 * prefix, goes to Delta's store.
 */
public class StartAfterS3LogStore extends HadoopFileSystemLogStore {

  private static final Pattern VERSION_PREFIX = Pattern.compile("\\d{20}\\..*");
  private static final PathLock PATH_LOCK = new PathLock();
  /** S3A's create option that skips its HEAD/LIST probes before an upload. */
  static final String CREATE_PERFORMANCE = "fs.s3a.create.performance";

  private final S3SingleDriverLogStore delta;

  public StartAfterS3LogStore(Configuration conf) {
    super(conf);
    this.delta = new S3SingleDriverLogStore(conf);
  }

  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration conf) throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    if (!(fs instanceof S3AFileSystem) || !VERSION_PREFIX.matcher(path.getName()).matches()) {
      return delta.listFrom(path, conf);
    }
    Path resolved = fs.makeQualified(path);
    Pages pages = new Pages((S3AFileSystem) fs, resolved);
    if (!pages.hasNext() && !pages.folderExists()) {
      throw new FileNotFoundException("No such file or directory: " + resolved.getParent());
    }
    return pages;
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration conf)
      throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    if (!(fs instanceof S3AFileSystem)) {
      delta.write(path, actions, overwrite, conf);
      return;
    }
    Path resolved = fs.makeQualified(path);
    try {
      PATH_LOCK.acquire(resolved);
    } catch (InterruptedException e) {
      throw new InterruptedIOException(e.getMessage());
    }
    try {
      if (!overwrite && exists((S3AFileSystem) fs, resolved)) {
        throw new java.nio.file.FileAlreadyExistsException(resolved.toUri().toString());
      }
      FSDataOutputStreamBuilder<?, ?> create = fs.createFile(resolved);
      create.overwrite(overwrite).opt(CREATE_PERFORMANCE, true);
      try (OutputStream out = create.build()) {
        while (actions.hasNext()) {
          out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
      }
    } finally {
      PATH_LOCK.release(resolved);
    }
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration conf) {
    return false; // an S3 object appears whole, once its upload completes
  }

  /** One HEAD request for the object itself (S3A's exists would also LIST it as a folder). */
  private static boolean exists(S3AFileSystem fs, Path path) throws IOException {
    try {
      fs.getS3AInternals().getObjectMetadata(path);
      return true;
    } catch (FileNotFoundException e) {
      return false;
    }
  }

  /** The folder's entries from a name on, one ListObjectsV2 page at a time, as asked for. */
  private static final class Pages extends LazyListing {
    private final S3Client s3;
    private final String bucket;
    private final String prefix;
    private final String from;
    private final Path parent;
    private final long blockSize;
    private String token;

    Pages(S3AFileSystem fs, Path resolved) {
      this.s3 = fs.getS3AInternals().getAmazonS3Client("urbpipe listFrom");
      this.bucket = fs.getBucket();
      this.parent = resolved.getParent();
      this.prefix = key(parent) + "/";
      this.from = resolved.getName();
      this.blockSize = fs.getDefaultBlockSize(resolved);
    }

    /** The S3 key of a qualified path: its path without the leading slash. */
    private static String key(Path path) {
      return path.toUri().getPath().substring(1);
    }

    /** True when anything is stored under the folder (a listing from a name past its end
     * returns nothing, which must not read as a missing table). */
    boolean folderExists() {
      ListObjectsV2Response page = s3.listObjectsV2(ListObjectsV2Request.builder()
          .bucket(bucket).prefix(prefix).maxKeys(1).build());
      return page.keyCount() != null && page.keyCount() > 0;
    }

    @Override
    protected void fetch() {
      ListObjectsV2Request.Builder request = ListObjectsV2Request.builder()
          .bucket(bucket).prefix(prefix).delimiter("/");
      if (token == null) {
        // the longest name that sorts strictly before every name >= from: from without its
        // last character ("…0042." → "…0042"); what lies between is dropped below
        request.startAfter(prefix + from.substring(0, from.length() - 1));
      } else {
        request.continuationToken(token);
      }
      ListObjectsV2Response page = s3.listObjectsV2(request.build());
      // S3 returns keys and common prefixes each in order; Hadoop lists them as one folder
      ArrayDeque<FileStatus> files = new ArrayDeque<>();
      for (S3Object object : page.contents()) {
        String name = object.key().substring(prefix.length());
        if (!name.isEmpty() && name.compareTo(from) >= 0) { // "" is S3A's folder marker
          files.add(new FileStatus(object.size(), false, 1, blockSize,
              object.lastModified().toEpochMilli(), new Path(parent, name)));
        }
      }
      ArrayDeque<FileStatus> folders = new ArrayDeque<>();
      for (CommonPrefix common : page.commonPrefixes()) {
        String name = common.prefix().substring(prefix.length(), common.prefix().length() - 1);
        if (name.compareTo(from) >= 0) {
          folders.add(new FileStatus(0, true, 1, 0, 0, new Path(parent, name)));
        }
      }
      while (!files.isEmpty() || !folders.isEmpty()) {
        boolean file = folders.isEmpty() || (!files.isEmpty()
            && files.peekFirst().getPath().getName()
                .compareTo(folders.peekFirst().getPath().getName()) < 0);
        ready.addLast(file ? files.removeFirst() : folders.removeFirst());
      }
      token = page.nextContinuationToken();
      done = !Boolean.TRUE.equals(page.isTruncated()) || token == null;
    }
  }
}
